package broker

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RegisterMetrics registers the broker's Prometheus collector on reg (the
// caller's registry; the broker never touches the global one). The figures
// are those of Inspector.Stats, gathered on each scrape; the lane and
// dead-letter gauges are omitted from a scrape on which Redis fails.
func (b *Broker) RegisterMetrics(reg prometheus.Registerer) error {
	return reg.Register(newCollector(b))
}

const metricPrefix = "computeboard_broker_"

type collector struct {
	b       *Broker
	timeout time.Duration

	capacity, held, leased, oldest, intakeRate *prometheus.Desc
	byPriority, byModule, modules              *prometheus.Desc
	laneUnread, lanePending, deadLetters       *prometheus.Desc
	read, reclaimed, handedOut, accepted       *prometheus.Desc
	expired, cancelled, deadLettered, lost     *prometheus.Desc
	rejected                                   *prometheus.Desc
}

func newCollector(b *Broker) *collector {
	consumer := prometheus.Labels{"consumer": b.cfg.Consumer}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(metricPrefix+name, help, labels, consumer)
	}
	return &collector{
		b: b, timeout: 2 * time.Second,
		capacity:   d("inbox_capacity", "Requests the inbox can hold."),
		held:       d("inbox_requests", "Requests held in the inbox, queued or handed out."),
		leased:     d("inbox_handed_out_requests", "Requests handed to the adapter and not yet accepted."),
		oldest:     d("inbox_oldest_age_seconds", "Age of the oldest request held in the inbox."),
		intakeRate: d("intake_rate_per_second", "Requests read from the lanes per second, mean over the last minute."),
		byPriority: d("inbox_requests_by_priority", "Requests held in the inbox by request priority.", "priority"),
		byModule: d("inbox_requests_by_module", "Requests held in the inbox by source module: the modules holding "+
			"the most, the rest summed under module=\""+OtherModules+"\".", "module"),
		modules:      d("inbox_modules", "Source modules with requests held in the inbox."),
		laneUnread:   d("lane_unread_requests", "Requests in an intake lane not yet read by any broker.", "lane"),
		lanePending:  d("lane_pending_requests", "Requests in an intake lane read by some broker and not yet finished.", "lane"),
		deadLetters:  d("dead_letters", "Messages in the dead-letter stream."),
		read:         d("read_total", "Requests read from the intake lanes."),
		reclaimed:    d("reclaimed_total", "Requests taken over from idle consumers."),
		handedOut:    d("handed_out_total", "Requests handed to the adapter by Next."),
		accepted:     d("accepted_total", "Requests accepted as jobs."),
		expired:      d("expired_total", "Requests whose TTL lapsed in the inbox."),
		cancelled:    d("cancelled_total", "Requests retracted before they started."),
		deadLettered: d("dead_lettered_total", "Dead letters written by this broker."),
		lost:         d("lost_total", "Held requests lost to another consumer."),
		rejected:     d("rejected_total", "Requests refused, by reason code.", "code"),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.capacity, c.held, c.leased, c.oldest, c.intakeRate, c.byPriority,
		c.byModule, c.modules, c.laneUnread, c.lanePending, c.deadLetters, c.read, c.reclaimed, c.handedOut, c.accepted,
		c.expired, c.cancelled, c.deadLettered, c.lost, c.rejected} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	s, err := c.b.Inspector().Stats(ctx)
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge(c.capacity, float64(s.Capacity))
	gauge(c.held, float64(s.Held))
	gauge(c.leased, float64(s.Leased))
	gauge(c.oldest, s.OldestAgeSeconds)
	gauge(c.intakeRate, s.IntakePerSecond)
	for p, n := range s.ByPriority {
		gauge(c.byPriority, float64(n), strconv.Itoa(p))
	}
	top, other := topModules(s.ByModule, c.b.cfg.MetricsTopModules)
	for _, m := range top {
		gauge(c.byModule, float64(s.ByModule[m]), m)
	}
	if len(top) < len(s.ByModule) {
		gauge(c.byModule, float64(other), OtherModules)
	}
	gauge(c.modules, float64(len(s.ByModule)))
	if err == nil {
		for lane, l := range s.Lanes {
			gauge(c.laneUnread, float64(l.Unread), strconv.Itoa(lane))
			gauge(c.lanePending, float64(l.Pending), strconv.Itoa(lane))
		}
		gauge(c.deadLetters, float64(s.DeadLetters))
	}
	counter(c.read, s.Read)
	counter(c.reclaimed, s.Reclaimed)
	counter(c.handedOut, s.HandedOut)
	counter(c.accepted, s.Accepted)
	counter(c.expired, s.Expired)
	counter(c.cancelled, s.Cancelled)
	counter(c.deadLettered, s.DeadLettered)
	counter(c.lost, s.Lost)
	for _, code := range slices.Sorted(maps.Keys(s.Rejected)) {
		counter(c.rejected, s.Rejected[code], code)
	}
}

// OtherModules is the module label under which the per-module metrics sum
// the modules outside the Config.MetricsTopModules largest, so that a
// flood of module names cannot flood the scrape.
const OtherModules = "_other"

// topModules returns the k modules of by holding the most (ties by name),
// in name order, and the sum of the others.
func topModules(by map[string]int, k int) (top []string, other int) {
	names := slices.Collect(maps.Keys(by))
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(cmp.Compare(by[b], by[a]), cmp.Compare(a, b)) })
	if len(names) > k {
		for _, m := range names[k:] {
			other += by[m]
		}
		names = names[:k]
	}
	slices.Sort(names)
	return names, other
}

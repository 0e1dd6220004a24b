package broker

import (
	"maps"
	"sync"
	"sync/atomic"

	"github.com/computeboard/computeboard/internal/clock"
)

// counters are the broker's running totals since New, read by Stats and
// the Prometheus collector.
type counters struct {
	read         atomic.Int64 // messages read from the lanes (new and own pending)
	reclaimed    atomic.Int64 // messages taken over from idle consumers
	handedOut    atomic.Int64 // deliveries returned by Next
	accepted     atomic.Int64 // Accept calls that succeeded
	expired      atomic.Int64 // requests expired in the inbox
	cancelled    atomic.Int64 // requests cancelled before they started
	deadLettered atomic.Int64 // dead letters written by this broker
	lost         atomic.Int64 // held requests lost to another consumer

	mu         sync.Mutex
	rejectedBy map[string]int64 // guarded by mu; refusals by reason code

	intake *rateWindow
}

func newCounters(c clock.Clock) *counters {
	return &counters{rejectedBy: map[string]int64{}, intake: &rateWindow{clock: c}}
}

func (c *counters) rejected(code string) {
	c.mu.Lock()
	c.rejectedBy[code]++
	c.mu.Unlock()
}

func (c *counters) rejections() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.rejectedBy)
}

// rateWindow counts events in one-second buckets over the last minute.
type rateWindow struct {
	clock clock.Clock

	mu      sync.Mutex
	buckets [60]int64 // guarded by mu; events in second s live in buckets[s%60]
	second  [60]int64 // guarded by mu; which second each bucket holds
}

const rateSpan = 60

func (w *rateWindow) add(n int) {
	if n == 0 {
		return
	}
	s := w.clock.Now().Unix()
	w.mu.Lock()
	i := s % rateSpan
	if w.second[i] != s {
		w.second[i], w.buckets[i] = s, 0
	}
	w.buckets[i] += int64(n)
	w.mu.Unlock()
}

// perSecond is the mean rate over the last full minute.
func (w *rateWindow) perSecond() float64 {
	now := w.clock.Now().Unix()
	w.mu.Lock()
	defer w.mu.Unlock()
	var sum int64
	for i := range w.buckets {
		if s := w.second[i]; s > now-rateSpan && s <= now {
			sum += w.buckets[i]
		}
	}
	return float64(sum) / float64(rateSpan)
}

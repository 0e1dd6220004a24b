package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/wire"
)

// Inspector is the operator's view of one broker: the requests its inbox
// holds, the lanes' backlog, and the dead-letter stream it shares with
// every broker of the board.
type Inspector struct{ b *Broker }

// Inspector returns the broker's inspector.
func (b *Broker) Inspector() *Inspector { return &Inspector{b: b} }

// Filter selects held requests for List. The zero value selects all.
type Filter struct {
	Module   string        // "" = any
	Priority *int          // nil = any
	MinAge   time.Duration // held at least this long
	Limit    int           // 0 = no limit
}

// Held is one request held in the inbox, as operators see it.
type Held struct {
	EntryID      string        `json:"entry_id"`
	JobID        string        `json:"job_id"`
	Module       string        `json:"module"`
	Account      string        `json:"account"`
	Name         string        `json:"name,omitempty"`
	Priority     int           `json:"priority"`
	Deadline     *time.Time    `json:"deadline,omitempty"`
	Lane         int           `json:"lane"`
	MessageID    string        `json:"message_id"`
	Arrived      time.Time     `json:"arrived"`
	AgeSeconds   float64       `json:"age_seconds"`
	Deliveries   int           `json:"deliveries"` // hand-outs so far, counting deliveries before this broker read it
	Leased       bool          `json:"leased"`     // handed out to the adapter, not yet accepted
	LeaseExpires *time.Time    `json:"lease_expires,omitempty"`
	Request      *wire.Request `json:"request,omitempty"` // Show only
}

func (i *Inspector) held(h HeldItem, now time.Time) Held {
	d := h.Value.(*Delivery)
	out := Held{
		EntryID: d.EntryID, JobID: d.JobID, Module: d.Module, Account: d.Request.Account, Name: d.Request.Name,
		Priority: d.Priority, Lane: d.Lane, MessageID: d.MessageID, Arrived: h.Arrived,
		AgeSeconds: now.Sub(h.Arrived).Seconds(), Deliveries: h.Deliveries, Leased: h.Leased,
	}
	if !d.Deadline.IsZero() {
		out.Deadline = &d.Deadline
	}
	if h.Leased {
		out.LeaseExpires = &h.LeaseExpires
	}
	return out
}

// List returns the held requests that match f, queued ones in hand-out
// order (per CompareItems), handed-out ones last.
func (i *Inspector) List(f Filter) []Held {
	now := i.b.cfg.Clock.Now()
	var out []Held
	for _, h := range i.b.inbox.Snapshot() {
		if f.Module != "" && h.Module != f.Module ||
			f.Priority != nil && h.Priority != *f.Priority ||
			now.Sub(h.Arrived) < f.MinAge {
			continue
		}
		out = append(out, i.held(h, now))
		if f.Limit > 0 && len(out) == f.Limit {
			break
		}
	}
	return out
}

// Show returns one held request with its decoded request.
func (i *Inspector) Show(entryID string) (Held, error) {
	h, ok := i.b.inbox.Get(entryID)
	if !ok {
		return Held{}, fmt.Errorf("broker: show %s: %w", entryID, ErrNotFound)
	}
	out := i.held(h, i.b.cfg.Clock.Now())
	r := h.Value.(*Delivery).Request
	out.Request = &r
	return out, nil
}

// LaneStats is the backlog of one intake lane, over all brokers.
type LaneStats struct {
	Length  int64 `json:"length"`  // messages in the stream (finished ones are deleted)
	Pending int64 `json:"pending"` // delivered to some broker, not yet finished
	Unread  int64 `json:"unread"`  // not yet delivered to any broker
}

// Stats are the broker's figures. Inbox figures are this broker's; lane
// and dead-letter figures are the board's.
type Stats struct {
	Consumer         string                   `json:"consumer"`
	Capacity         int                      `json:"capacity"`
	Held             int                      `json:"held"`   // queued plus handed out
	Leased           int                      `json:"leased"` // handed out, not yet accepted
	ByPriority       [NumPriorities]int       `json:"by_priority"`
	ByModule         map[string]int           `json:"by_module"`
	OldestAgeSeconds float64                  `json:"oldest_age_seconds"`
	IntakePerSecond  float64                  `json:"intake_per_second"` // messages read, mean over the last minute
	Lanes            [NumPriorities]LaneStats `json:"lanes"`
	DeadLetters      int64                    `json:"dead_letters"` // length of the dead-letter stream

	// Totals since this broker started.
	Read         int64            `json:"read"`
	Reclaimed    int64            `json:"reclaimed"`
	HandedOut    int64            `json:"handed_out"`
	Accepted     int64            `json:"accepted"`
	Expired      int64            `json:"expired"`
	Cancelled    int64            `json:"cancelled"`
	DeadLettered int64            `json:"dead_lettered"`
	Lost         int64            `json:"lost"`
	Rejected     map[string]int64 `json:"rejected"` // by reason code
}

// Stats gathers the figures (one pipelined round trip to Redis).
func (i *Inspector) Stats(ctx context.Context) (Stats, error) {
	b := i.b
	now := b.cfg.Clock.Now()
	s := Stats{Consumer: b.cfg.Consumer, Capacity: b.inbox.Capacity(), ByModule: map[string]int{}}
	for _, h := range b.inbox.Snapshot() {
		s.Held++
		if h.Leased {
			s.Leased++
		}
		s.ByPriority[h.Priority]++
		s.ByModule[h.Module]++
		s.OldestAgeSeconds = max(s.OldestAgeSeconds, now.Sub(h.Arrived).Seconds())
	}
	s.IntakePerSecond = b.m.intake.perSecond()
	s.Read, s.Reclaimed, s.HandedOut = b.m.read.Load(), b.m.reclaimed.Load(), b.m.handedOut.Load()
	s.Accepted, s.Expired, s.Cancelled = b.m.accepted.Load(), b.m.expired.Load(), b.m.cancelled.Load()
	// Starts the job store found withdrawn were cancelled too (the store is
	// the adapter's as well, so its starts count here).
	s.Cancelled += b.jobs.Stats().CancelledAtStart
	s.DeadLettered, s.Lost, s.Rejected = b.m.deadLettered.Load(), b.m.lost.Load(), b.m.rejections()

	var lens [NumPriorities][]*redis.IntCmd // per priority: every lane of that priority (lanes.go)
	var pend [NumPriorities][]*redis.XPendingCmd
	var dlq *redis.IntCmd
	keys := b.LaneKeys()
	_, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for lane := range NumPriorities {
			for _, k := range keys[lane] {
				lens[lane] = append(lens[lane], p.XLen(ctx, k))
				pend[lane] = append(pend[lane], p.XPending(ctx, k, blackboard.InboxGroup))
			}
		}
		dlq = p.XLen(ctx, b.keys.DLQ())
		return nil
	})
	if err != nil && !isNoGroup(err) {
		return s, fmt.Errorf("broker: stats: %w", err)
	}
	for lane := range NumPriorities {
		l := &s.Lanes[lane]
		for i := range lens[lane] {
			l.Length += lens[lane][i].Val()
			if pend[lane][i].Err() == nil {
				l.Pending += pend[lane][i].Val().Count
			}
		}
		l.Unread = max(0, l.Length-l.Pending)
	}
	s.DeadLetters = dlq.Val()
	return s, nil
}

// Drop removes a held request: it is dead-lettered with reason "dropped"
// (so DLQReplay can bring it back), its job entry says cancelled, and it
// never runs. ErrNotFound if this broker does not hold it.
func (i *Inspector) Drop(ctx context.Context, entryID string) error {
	it, ok := i.b.inbox.Remove(entryID)
	if !ok {
		return fmt.Errorf("broker: drop %s: %w", entryID, ErrNotFound)
	}
	d := new(Delivery)
	*d = *it.Value.(*Delivery) // a copy: its holder, if leased, may still read it
	d.Deliveries = max(d.Deliveries, it.Deliveries)
	if err := i.b.deadLetter(ctx, d, ReasonDropped, &wire.Error{Message: "dropped by an operator"}); err != nil {
		return fmt.Errorf("broker: drop %s: %w", entryID, err)
	}
	return nil
}

// Requeue takes a request back from the adapter (its lease is revoked, so
// the holder's Accept fails with ErrLeaseLost) and queues it again in its
// place. ErrNotFound if it is not handed out by this broker.
func (i *Inspector) Requeue(entryID string) error {
	if !i.b.inbox.Requeue(entryID) {
		return fmt.Errorf("broker: requeue %s: %w: not handed out here", entryID, ErrNotFound)
	}
	return nil
}

// DeadLetter is one message of the dead-letter stream.
type DeadLetter struct {
	ID         string          `json:"id"` // stream id in the dead-letter stream
	EntryID    string          `json:"entry_id"`
	Reason     string          `json:"reason"` // Reason* constants
	Code       string          `json:"code"`   // wire reason code; "" for dropped
	Message    string          `json:"message"`
	Entry      json.RawMessage `json:"entry"` // the request entry, canonical JSON (a JSON string if it was not JSON, or truncated)
	FailedAt   float64         `json:"failed_at"`
	Deliveries int             `json:"deliveries"`
	// EntryBytes and EntryDigest ("sha256:<hex>", or "sha1:<hex>" for a
	// message measured by Redis) describe the whole entry; Truncated: Entry
	// holds only its first Config.DLQEntryBytes bytes (as a JSON string),
	// and the dead letter cannot be replayed.
	EntryBytes  int    `json:"entry_bytes,omitempty"`
	EntryDigest string `json:"entry_digest,omitempty"`
	Truncated   bool   `json:"truncated,omitempty"`
}

// DLQList returns up to count dead letters (default 100) after stream id
// after ("" = from the oldest).
func (i *Inspector) DLQList(ctx context.Context, after string, count int) ([]DeadLetter, error) {
	start := "-"
	if after != "" {
		start = "(" + after
	}
	if count <= 0 {
		count = 100
	}
	msgs, err := i.b.rdb.XRangeN(ctx, i.b.keys.DLQ(), start, "+", int64(count)).Result()
	if err != nil {
		return nil, fmt.Errorf("broker: dead letters: %w", err)
	}
	out := make([]DeadLetter, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, decodeDeadLetter(m))
	}
	return out, nil
}

// msgField is the string field k of stream message m.
func msgField(m redis.XMessage, k string) string { v, _ := m.Values[k].(string); return v }

func decodeDeadLetter(m redis.XMessage) DeadLetter {
	s := func(k string) string { return msgField(m, k) }
	dl := DeadLetter{ID: m.ID, EntryID: s("entry_id"), Reason: s("reason"), Code: s("code"), Message: s("message")}
	dl.FailedAt, _ = strconv.ParseFloat(s("failed_at"), 64)
	dl.Deliveries, _ = strconv.Atoi(s("deliveries"))
	dl.EntryBytes, _ = strconv.Atoi(s("entry_bytes"))
	dl.EntryDigest, dl.Truncated = s("entry_digest"), s("truncated") == "1"
	if e := s("entry"); !dl.Truncated && json.Valid([]byte(e)) {
		dl.Entry = json.RawMessage(e)
	} else {
		dl.Entry, _ = json.Marshal(e)
	}
	return dl
}

// DLQReplay moves one dead letter back to its intake lane, once (the dead
// letter is deleted in the same step). The replayed request skips the
// per-module admission limits but is otherwise decoded, checked and expired
// as usual. It returns the new intake message id. A truncated dead letter
// (its entry was over Config.DLQEntryBytes) is refused with ErrTruncated:
// only the start of the entry was kept, so it cannot be replayed
// faithfully; the poster must post the request again.
func (i *Inspector) DLQReplay(ctx context.Context, id string) (string, error) {
	msgs, err := i.b.rdb.XRangeN(ctx, i.b.keys.DLQ(), id, id, 1).Result()
	if err != nil {
		return "", fmt.Errorf("broker: replay %s: %w", id, err)
	}
	if len(msgs) == 0 {
		return "", fmt.Errorf("broker: replay %s: %w", id, ErrNotFound)
	}
	dl := decodeDeadLetter(msgs[0])
	if dl.Truncated {
		return "", fmt.Errorf("broker: replay %s: %w: it keeps %d of the entry's %d bytes (%s); post the request again",
			id, ErrTruncated, len(msgField(msgs[0], "entry")), dl.EntryBytes, dl.EntryDigest)
	}
	var e blackboard.Entry
	if err := json.Unmarshal(dl.Entry, &e); err != nil || e.ID == "" {
		return "", fmt.Errorf("broker: replay %s: the dead letter holds no readable entry", id)
	}
	lane := i.b.replayLane(msgField(msgs[0], "lane"), e)
	if lane == "" {
		return "", fmt.Errorf("broker: replay %s: entry id %q names no module lane", id, e.ID)
	}
	args := []any{id, "v", "2", "entry_id", e.ID, "topic", e.Topic, "priority", strconv.Itoa(int(e.Priority)),
		"timestamp", formatFloat(e.Timestamp), "entry", string(dl.Entry), "replayed", "1"}
	newID, err := scriptReplay.Run(ctx, i.b.rdb, []string{i.b.keys.DLQ(), lane, i.b.keys.Replayed()}, args...).Text()
	if errors.Is(err, redis.Nil) {
		return "", fmt.Errorf("broker: replay %s: %w: already replayed", id, ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("broker: replay %s: %w", id, err)
	}
	return newID, nil
}

// DLQReplayAll replays every dead letter that holds a readable entry and
// returns how many it replayed.
//
// It looks at as many as the stream held when it began: a replayed request
// that is refused again is dead-lettered anew, at the stream's end, and
// must not be replayed again by the same call (nor keep it going).
func (i *Inspector) DLQReplayAll(ctx context.Context) (int, error) {
	held, err := i.b.rdb.XLen(ctx, i.b.keys.DLQ()).Result()
	if err != nil {
		return 0, fmt.Errorf("broker: replay all: %w", err)
	}
	n, after := 0, ""
	for seen := 0; int64(seen) < held; {
		k, looked, next, err := i.DLQReplayBatch(ctx, after, int(min(200, held-int64(seen))))
		n += k
		seen += looked
		if err != nil || looked == 0 {
			return n, err
		}
		after = next
	}
	return n, nil
}

// DLQReplayBatch replays, as DLQReplayAll does, at most max of the dead
// letters after cursor after ("": from the oldest). It returns how many it
// replayed, how many it looked at (fewer than max: the end of the stream),
// and the cursor to go on from (the last one it looked at): what a client
// that shows its progress through a long replay calls in a loop.
func (i *Inspector) DLQReplayBatch(ctx context.Context, after string, max int) (n, looked int, next string, err error) {
	dls, err := i.DLQList(ctx, after, max)
	if err != nil {
		return 0, 0, after, err
	}
	next = after
	for _, dl := range dls {
		next = dl.ID
		looked++
		if _, err := i.DLQReplay(ctx, dl.ID); err == nil {
			n++
		} else if ctx.Err() != nil {
			return n, looked, next, ctx.Err()
		}
	}
	return n, looked, next, nil
}

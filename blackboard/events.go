package blackboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Lifecycle event types; their source is "blackboard".
const (
	EventEntryAdded         = "blackboard.entry.added"
	EventEntryUpdated       = "blackboard.entry.updated"
	EventEntryRemoved       = "blackboard.entry.removed"
	EventEntryExpired       = "blackboard.entry.expired"
	EventModuleRegistered   = "blackboard.module.registered"
	EventModuleUnregistered = "blackboard.module.unregistered"
	EventSweepComplete      = "blackboard.sweep.complete"
)

const lifecycleSource = "blackboard"

// Event is one message of the events stream (ASI:BUILD's CognitiveEvent).
type Event struct {
	StreamID  string          // position in the stream; set when read, a cursor for Events
	ID        string          // event_id: 32 hex; Emit fills it when empty
	Type      string          // event_type, dotted
	Source    string          // "blackboard" for lifecycle events, else the module; Emit defaults to "system"
	Timestamp float64         // epoch seconds; Emit fills it from the Clock when 0
	Payload   json.RawMessage // a JSON object; Emit defaults to {}
}

// Emit appends a module event (e.g. source "compute", type
// "compute.job.completed") to the events stream and returns its stream id.
func (s *Store) Emit(ctx context.Context, ev Event) (string, error) {
	id, err := s.emit(ctx, ev, s.clock.Now())
	if err != nil {
		return "", fmt.Errorf("blackboard: emit %s: %w", ev.Type, err)
	}
	return id, nil
}

func (s *Store) emit(ctx context.Context, ev Event, now time.Time) (string, error) {
	ev, err := readyEvent(ev, now)
	if err != nil {
		return "", err
	}
	return s.rdb.XAdd(ctx, &redis.XAddArgs{
		Stream: s.keys.Events(), MaxLen: s.eventsMaxLen, Approx: true,
		Values: []any{"event_id", ev.ID, "event_type", ev.Type, "source", ev.Source,
			"timestamp", formatFloat(ev.Timestamp), "payload", string(ev.Payload)},
	}).Result()
}

// readyEvent checks a module event and fills its defaults as Emit
// documents them: an ID, source "system", the timestamp now, payload {}.
func readyEvent(ev Event, now time.Time) (Event, error) {
	if ev.Type == "" {
		return ev, fmt.Errorf("%w: empty event type", ErrInvalid)
	}
	if len(ev.Payload) == 0 {
		ev.Payload = json.RawMessage("{}")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(ev.Payload, &obj); err != nil || obj == nil {
		return ev, fmt.Errorf("%w: payload is not a JSON object", ErrInvalid)
	}
	if ev.ID == "" {
		ev.ID = NewID()
	}
	if ev.Source == "" {
		ev.Source = "system"
	}
	if ev.Timestamp == 0 {
		ev.Timestamp = epoch(now)
	}
	return ev, nil
}

var streamIDRe = regexp.MustCompile(`^[0-9]+(-[0-9]+)?$`)

// Events reads up to count events after cursor ("0" or "" = from the start,
// "$" = only events added from now on, else a StreamID), keeps those whose
// type matches pattern (fnmatch; "" = all), and returns them with the cursor
// to pass next time. With block > 0 it waits up to block for new events.
// The next cursor advances past filtered-out events too.
func (s *Store) Events(ctx context.Context, cursor, pattern string, count int, block time.Duration) ([]Event, string, error) {
	evs, next, _, err := s.EventsScanned(ctx, cursor, pattern, count, block)
	return evs, next, err
}

// EventsScanned is Events, and also says how many events the read took
// from the stream, matching pattern or not: count means there may be more
// to read at once.
func (s *Store) EventsScanned(ctx context.Context, cursor, pattern string, count int, block time.Duration) (evs []Event, next string, scanned int, err error) {
	cursor, err = s.resolveCursor(ctx, cursor)
	if err != nil {
		return nil, cursor, 0, fmt.Errorf("blackboard: events: %w", err)
	}
	if count <= 0 {
		count = 100
	}
	args := &redis.XReadArgs{Streams: []string{s.keys.Events(), cursor}, Count: int64(count), Block: -1}
	if block > 0 {
		args.Block = block // XRead also sets the read timeout to match
	}
	res, err := s.rdb.XRead(ctx, args).Result()
	if errors.Is(err, redis.Nil) {
		return nil, cursor, 0, nil
	}
	if err != nil {
		return nil, cursor, 0, fmt.Errorf("blackboard: events: %w", err)
	}
	for _, st := range res {
		for _, m := range st.Messages {
			cursor = m.ID
			scanned++
			// Most events of a busy board are of types the caller did not
			// ask for: match the raw type, decode only what matches.
			if typ, _ := m.Values["event_type"].(string); pattern == "" || Fnmatch(pattern, typ) {
				evs = append(evs, decodeEvent(m))
			}
		}
	}
	return evs, cursor, scanned, nil
}

// resolveCursor turns "" into "0" and "$" into the id of the newest event,
// so that the returned cursor never skips events added between calls.
func (s *Store) resolveCursor(ctx context.Context, cursor string) (string, error) {
	switch {
	case cursor == "" || cursor == "0":
		return "0", nil
	case cursor == "$":
		last, err := s.rdb.XRevRangeN(ctx, s.keys.Events(), "+", "-", 1).Result()
		if err != nil {
			return cursor, err
		}
		if len(last) == 0 {
			return "0", nil
		}
		return last[0].ID, nil
	case streamIDRe.MatchString(cursor):
		return cursor, nil
	}
	return cursor, fmt.Errorf("%w: cursor %q", ErrInvalid, cursor)
}

// subscribeBlock bounds each blocking read of Subscribe, so a cancelled
// context is noticed promptly.
const subscribeBlock = 200 * time.Millisecond

// Subscribe calls handler, in order, for every event after from (a cursor
// as in Events) whose type matches pattern, until ctx is done (then it
// returns nil) or handler returns an error (then Subscribe returns it).
// handler runs in the caller's goroutine and under no lock; a slow handler
// delays only this subscriber.
func (s *Store) Subscribe(ctx context.Context, pattern, from string, handler func(Event) error) error {
	cursor, err := s.resolveCursor(ctx, from)
	if err != nil {
		return fmt.Errorf("blackboard: subscribe %s: %w", pattern, err)
	}
	for ctx.Err() == nil {
		evs, next, err := s.Events(ctx, cursor, pattern, 100, subscribeBlock)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("blackboard: subscribe %s: %w", pattern, err)
		}
		cursor = next
		for _, ev := range evs {
			if err := handler(ev); err != nil {
				return fmt.Errorf("blackboard: subscribe %s: handler: %w", pattern, err)
			}
		}
	}
	return nil
}

// History returns up to limit events whose type matches pattern ("" = all),
// newest first; limit <= 0 means all that the stream still holds.
func (s *Store) History(ctx context.Context, pattern string, limit int) ([]Event, error) {
	var out []Event
	end := "+"
	for {
		page, err := s.rdb.XRevRangeN(ctx, s.keys.Events(), end, "-", 256).Result()
		if err != nil {
			return nil, fmt.Errorf("blackboard: history: %w", err)
		}
		for _, m := range page {
			if typ, _ := m.Values["event_type"].(string); pattern == "" || Fnmatch(pattern, typ) {
				out = append(out, decodeEvent(m))
				if limit > 0 && len(out) == limit {
					return out, nil
				}
			}
		}
		if len(page) < 256 {
			return out, nil
		}
		end = "(" + page[len(page)-1].ID
	}
}

func decodeEvent(m redis.XMessage) Event {
	str := func(k string) string { v, _ := m.Values[k].(string); return v }
	ev := Event{StreamID: m.ID, ID: str("event_id"), Type: str("event_type"), Source: str("source")}
	ev.Timestamp, _ = strconv.ParseFloat(str("timestamp"), 64)
	if p := str("payload"); p != "" {
		ev.Payload = json.RawMessage(p)
	}
	return ev
}

package blackboard

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/internal/clock"
)

// Store is a board in Redis. It holds no lock and no cache: every change is
// one Lua script, so any number of Stores, in any number of processes, can
// share a board. Methods are safe for concurrent use.
type Store struct {
	rdb           redis.UniversalClient
	keys          Keys
	common        []string // keys.common(), built once: read-only
	clock         clock.Clock
	log           *slog.Logger
	maxEntries    int // > 0, or -1 for unlimited
	eventsMaxLen  int64
	sweepInterval time.Duration
	retention     time.Duration // > 0, or < 0 to keep expired entries forever
	queryPlan     int           // planAuto; tests force planWalk or planIntersect
}

// New returns a Store for the board cfg.Namespace on rdb.
func New(rdb redis.UniversalClient, cfg Config) (*Store, error) {
	if rdb == nil {
		return nil, fmt.Errorf("blackboard: new: %w: nil redis client", ErrInvalid)
	}
	ns := cmp.Or(cfg.Namespace, defaultNamespace)
	if strings.ContainsAny(ns, "{}") {
		return nil, fmt.Errorf("blackboard: new: %w: namespace %q contains a brace", ErrInvalid, ns)
	}
	s := &Store{
		rdb:           rdb,
		keys:          NewKeys(ns),
		common:        NewKeys(ns).common(),
		clock:         cfg.Clock,
		log:           cfg.Logger,
		maxEntries:    cmp.Or(cfg.MaxEntries, defaultMaxEntries),
		eventsMaxLen:  cmp.Or(cfg.EventsMaxLen, defaultEventsMaxLen),
		sweepInterval: cmp.Or(cfg.SweepInterval, defaultSweepInterval),
		retention:     cmp.Or(cfg.Retention, defaultRetention),
	}
	switch {
	case s.maxEntries < -1:
		return nil, fmt.Errorf("blackboard: new: %w: MaxEntries %d", ErrInvalid, s.maxEntries)
	case s.eventsMaxLen < 0:
		return nil, fmt.Errorf("blackboard: new: %w: EventsMaxLen %d", ErrInvalid, s.eventsMaxLen)
	case s.sweepInterval < 0:
		return nil, fmt.Errorf("blackboard: new: %w: SweepInterval %v", ErrInvalid, s.sweepInterval)
	}
	if s.clock == nil {
		s.clock = clock.Real{}
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.log = s.log.With("component", "blackboard")
	return s, nil
}

// Keys returns the key names of this board, for packages (the broker) that
// read the intake lanes and job records directly.
func (s *Store) Keys() Keys { return s.keys }

// StreamAck names a stream message to acknowledge (XACK) in the same atomic
// step as an entry transition. Stream must be a key of this board.
type StreamAck struct {
	Stream    string // e.g. Keys().ModuleInbox("planner", 4)
	Group     string // e.g. InboxGroup
	MessageID string
}

func (s *Store) checkAck(a *StreamAck) error {
	if a == nil {
		return nil
	}
	if !s.keys.owns(a.Stream) || a.Group == "" || a.MessageID == "" {
		return fmt.Errorf("%w: stream ack %+v", ErrInvalid, *a)
	}
	return nil
}

// addedPayload is the blackboard.entry.added payload.
type addedPayload struct {
	EntryID      string `json:"entry_id"`
	Topic        string `json:"topic"`
	SourceModule string `json:"source_module"`
	Priority     string `json:"priority"`
}

// prepare fills e's ID, Timestamp and Status when empty, normalizes its
// Tags and Data (as stored), validates it and encodes it for post.lua.
func (s *Store) prepare(e *Entry, now time.Time) (postItem, error) {
	if e == nil {
		return postItem{}, fmt.Errorf("%w: nil entry", ErrInvalid)
	}
	if e.ID == "" {
		e.ID = NewID()
	}
	if e.Timestamp == 0 {
		e.Timestamp = epoch(now)
	}
	if e.Status == "" {
		e.Status = StatusActive
	}
	e.Tags = normTags(e.Tags)
	if err := e.Validate(); err != nil {
		return postItem{}, err
	}
	f, err := e.encodeData(true) // Validate checked the data
	if err != nil {
		return postItem{}, err
	}
	e.Data = json.RawMessage(f.data) // as stored: compacted, null when empty
	lane, entryJSON, laneKey, member := -1, "", "", ""
	if e.Topic == RequestTopic {
		lane = RequestLane(*e)
		b, err := e.marshalFields(f)
		if err != nil {
			return postItem{}, err
		}
		entryJSON = string(b)
		laneKey = s.keys.RequestLane(e.SourceModule, lane)
		if ValidModule(e.SourceModule) {
			member = LaneMember(e.SourceModule, lane)
		}
	}
	added, err := addedJSON(addedPayload{e.ID, e.Topic, e.SourceModule, e.Priority.String()})
	if err != nil {
		return postItem{}, err
	}
	return postItem{e: e, lane: laneKey, args: []any{
		e.ID, e.Topic, e.SourceModule, string(f.status), e.ParentID, f.timestamp, f.conf, f.ttl,
		f.priority, f.data, f.metadata, f.tags, lane, entryJSON, added, member,
	}}, nil
}

// addedJSON is marshal(p), built by hand when every field is plain (see
// plainJSON): the common case, without reflection.
func addedJSON(p addedPayload) (string, error) {
	if plainJSON(p.EntryID) && plainJSON(p.Topic) && plainJSON(p.SourceModule) && plainJSON(p.Priority) {
		return `{"entry_id":"` + p.EntryID + `","topic":"` + p.Topic + `","source_module":"` + p.SourceModule +
			`","priority":"` + p.Priority + `"}`, nil
	}
	b, err := marshal(p)
	return string(b), err
}

func idOf(e *Entry) string {
	if e == nil {
		return ""
	}
	return e.ID
}

// Post stores a new entry and emits blackboard.entry.added; a compute.request
// entry is also appended to its intake lane in the same step (its module's own
// lane, Keys.RequestLane, registered in Keys.InboxLanes). Post fills
// e.ID, e.Timestamp and e.Status when empty, sorts e.Tags and compacts e.Data. An id already
// on the board is ErrConflict (the original silently overwrote it). When the
// board is over MaxEntries, older entries are then evicted.
func (s *Store) Post(ctx context.Context, e *Entry) (string, error) {
	created, err := s.postOne(ctx, "post", e)
	if err != nil {
		return "", err
	}
	if !created {
		return "", fmt.Errorf("blackboard: post %s: %w: entry exists", e.ID, ErrConflict)
	}
	return e.ID, nil
}

// PostIfAbsent is Post that leaves an existing entry with the same id alone
// and reports whether it created one. With a derived id it makes posting
// idempotent.
func (s *Store) PostIfAbsent(ctx context.Context, e *Entry) (created bool, err error) {
	return s.postOne(ctx, "post-if-absent", e)
}

func (s *Store) postOne(ctx context.Context, op string, e *Entry) (bool, error) {
	now := s.clock.Now()
	it, err := s.prepare(e, now)
	if err != nil {
		return false, fmt.Errorf("blackboard: %s %s: %w", op, idOf(e), err)
	}
	taken, count, err := s.post(ctx, now, []postItem{it})
	if err != nil {
		return false, fmt.Errorf("blackboard: %s %s: %w", op, e.ID, err)
	}
	if taken >= 0 {
		return false, nil
	}
	s.enforceCapacity(ctx, now, count, e.ID)
	return true, nil
}

// PostMany posts entries atomically: all are stored, or none (any invalid
// entry or taken id fails the whole batch). Events follow in order.
func (s *Store) PostMany(ctx context.Context, entries []*Entry) ([]string, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	now := s.clock.Now()
	items := make([]postItem, len(entries))
	ids := make([]string, len(entries))
	seen := make(map[string]bool, len(entries))
	for i, e := range entries {
		it, err := s.prepare(e, now)
		if err != nil {
			return nil, fmt.Errorf("blackboard: post many %s: %w", idOf(e), err)
		}
		if seen[e.ID] {
			return nil, fmt.Errorf("blackboard: post many %s: %w: id repeated in batch", e.ID, ErrConflict)
		}
		seen[e.ID] = true
		items[i], ids[i] = it, e.ID
	}
	taken, count, err := s.post(ctx, now, items)
	if err != nil {
		return nil, fmt.Errorf("blackboard: post many: %w", err)
	}
	if taken >= 0 {
		return nil, fmt.Errorf("blackboard: post many %s: %w: entry exists", ids[taken], ErrConflict)
	}
	s.enforceCapacity(ctx, now, count, ids...)
	return ids, nil
}

// GetMany is Get for many entries in one round trip (plus one per entry
// found expired but still ACTIVE, which it marks expired as Get does).
// errs[i] is Get's error for ids[i].
func (s *Store) GetMany(ctx context.Context, ids []string) (entries []Entry, errs []error, err error) {
	entries, errs = make([]Entry, len(ids)), make([]error, len(ids))
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			if ValidID(id) {
				cmds[i] = p.HGetAll(ctx, s.keys.Entry(id))
			}
		}
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("blackboard: get many: %w", err)
	}
	now := s.clock.Now()
	for i, id := range ids {
		entries[i], errs[i] = s.fromHash(ctx, now, id, cmds[i])
	}
	return entries, errs, nil
}

// Get returns an entry. An entry whose TTL has lapsed is ErrNotFound, as in
// the original; if it was still ACTIVE it is marked expired on the way
// (emitting blackboard.entry.expired once).
func (s *Store) Get(ctx context.Context, id string) (Entry, error) {
	if !ValidID(id) {
		return Entry{}, fmt.Errorf("blackboard: get %s: %w: bad id", id, ErrInvalid)
	}
	return s.fromHash(ctx, s.clock.Now(), id, s.rdb.HGetAll(ctx, s.keys.Entry(id)))
}

// fromHash is Get's decoding of the entry HASH that c read (nil: id is
// not a valid id).
func (s *Store) fromHash(ctx context.Context, now time.Time, id string, c *redis.MapStringStringCmd) (Entry, error) {
	if c == nil {
		return Entry{}, fmt.Errorf("blackboard: get %s: %w: bad id", id, ErrInvalid)
	}
	h, err := c.Result()
	if err != nil {
		return Entry{}, fmt.Errorf("blackboard: get %s: %w", id, err)
	}
	if len(h) == 0 {
		return Entry{}, fmt.Errorf("blackboard: get %s: %w", id, ErrNotFound)
	}
	e, err := DecodeHash(h)
	if err != nil {
		return Entry{}, fmt.Errorf("blackboard: get %s: %w", id, err)
	}
	if e.IsExpired(now) {
		if e.Status == StatusActive {
			if _, err := s.expire(ctx, now, id, true, nil); err != nil && !errors.Is(err, ErrNotFound) {
				return Entry{}, fmt.Errorf("blackboard: get %s: %w", id, err)
			}
		}
		return Entry{}, fmt.Errorf("blackboard: get %s: %w: expired", id, ErrNotFound)
	}
	return e, nil
}

// Statuses returns the status of each entry in one round trip ("" for an
// entry that does not exist); it neither decodes the entries nor expires
// them (what the scheduler needs to see retractions it missed).
func (s *Store) Statuses(ctx context.Context, ids []string) ([]Status, error) {
	cmds := make([]*redis.StringCmd, len(ids))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HGet(ctx, s.keys.Entry(id), "status")
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("blackboard: statuses: %w", err)
	}
	out := make([]Status, len(ids))
	for i, c := range cmds {
		out[i] = Status(c.Val())
	}
	return out, nil
}

// Update changes entry fields in place; a nil field is left alone. Each
// field whose value changes emits one blackboard.entry.updated event
// (old/new as JSON: status as its value, priority as its name, tags as a
// sorted array). Topic, source, TTL and parent cannot change.
type Update struct {
	Data       *json.RawMessage
	Confidence *float64
	Status     *Status
	Priority   *Priority
	Tags       *[]string
	Metadata   *map[string]any
	// Unlist, when set, is a sorted set of this board that the entry's id
	// leaves in the same atomic step, when the update applies: a caller's
	// list of entries it still owes an update (the job store's changes
	// not yet mirrored, Keys.JobsUnmirrored).
	Unlist string
	// Guard, when set, is a precondition read in the update's own atomic
	// step: the update applies only while field Guard.Field of this
	// board's HASH Guard.Key holds Guard.Value. Otherwise nothing is
	// written (no event, no Unlist) and the update fails with ErrStale,
	// whether or not the entry exists. The job store's mirrors use it: a
	// job record's change is written onto its job entry only while the
	// record is still at that change's version, so a mirror delayed past a
	// newer one cannot take the entry back.
	Guard *Guard
}

// Guard is an Update's precondition on another HASH of the board.
type Guard struct {
	Key, Field, Value string
}

// pairs validates u and encodes it as update.lua's field/value pairs.
func (u Update) pairs() ([]any, error) {
	var p []any
	if u.Data != nil {
		f, err := Entry{Data: *u.Data}.encode()
		if err != nil {
			return nil, err
		}
		p = append(p, "data", f.data)
	}
	if c := u.Confidence; c != nil {
		if !finite(*c) || *c < 0 || *c > 1 {
			return nil, fmt.Errorf("%w: confidence %v outside [0,1]", ErrInvalid, *c)
		}
		p = append(p, "confidence", formatFloat(*c))
	}
	if st := u.Status; st != nil {
		if !st.valid() {
			return nil, fmt.Errorf("%w: status %q", ErrInvalid, *st)
		}
		p = append(p, "status", string(*st))
	}
	if pr := u.Priority; pr != nil {
		if !pr.valid() {
			return nil, fmt.Errorf("%w: priority %d outside 0..3", ErrInvalid, int(*pr))
		}
		p = append(p, "priority", strconv.Itoa(int(*pr)))
	}
	if u.Tags != nil {
		f, _ := Entry{Tags: *u.Tags}.encode()
		p = append(p, "tags", f.tags)
	}
	if u.Metadata != nil {
		f, err := Entry{Metadata: *u.Metadata}.encode()
		if err != nil {
			return nil, err
		}
		p = append(p, "metadata", f.metadata)
	}
	return p, nil
}

// Update applies u to entry id. A missing entry is ErrNotFound.
func (s *Store) Update(ctx context.Context, id string, u Update) error {
	return s.applyUpdate(ctx, "update", id, "", u, nil)
}

// UpdateIf applies u only if the entry's status is expect, atomically;
// otherwise it returns ErrConflict and changes nothing.
func (s *Store) UpdateIf(ctx context.Context, id string, expect Status, u Update) error {
	if !expect.valid() {
		return fmt.Errorf("blackboard: update %s: %w: expected status %q", id, ErrInvalid, expect)
	}
	return s.applyUpdate(ctx, "update", id, expect, u, nil)
}

// UpdateEmit applies u to entry id, as Update does, and appends ev (a
// module event, its defaults as Emit fills them) to the events stream in
// the same atomic step, after the update's own events. The event is added
// only when the update applies: a missing entry is ErrNotFound, and then
// nothing is written. So a reader who sees ev finds the entry changed
// already, and neither is kept without the other: one round trip where
// Update and Emit take two.
func (s *Store) UpdateEmit(ctx context.Context, id string, u Update, ev Event) error {
	ev, err := readyEvent(ev, s.clock.Now())
	if err != nil {
		return fmt.Errorf("blackboard: update %s: %w", id, err)
	}
	return s.applyUpdate(ctx, "update", id, "", u, &ev)
}

// Retract marks an entry retracted (a soft delete, kept for provenance).
func (s *Store) Retract(ctx context.Context, id string) error {
	st := StatusRetracted
	return s.applyUpdate(ctx, "retract", id, "", Update{Status: &st}, nil)
}

// applyUpdate runs update.lua for u, and with ev appends ev after it.
func (s *Store) applyUpdate(ctx context.Context, op, id string, expect Status, u Update, ev *Event) error {
	if !ValidID(id) {
		return fmt.Errorf("blackboard: %s %s: %w: bad id", op, id, ErrInvalid)
	}
	pairs, err := u.pairs()
	if err != nil {
		return fmt.Errorf("blackboard: %s %s: %w", op, id, err)
	}
	if u.Unlist != "" && !s.keys.owns(u.Unlist) {
		return fmt.Errorf("blackboard: %s %s: %w: unlist key %q is not this board's", op, id, ErrInvalid, u.Unlist)
	}
	if g := u.Guard; g != nil && (!s.keys.owns(g.Key) || g.Field == "") {
		return fmt.Errorf("blackboard: %s %s: %w: guard %q of key %q", op, id, ErrInvalid, g.Field, g.Key)
	}
	if _, err := s.update(ctx, s.clock.Now(), id, expect, ev, u.Unlist, u.Guard, pairs); err != nil {
		return fmt.Errorf("blackboard: %s %s: %w", op, id, err)
	}
	return nil
}

// Supersede marks entry oldID superseded and posts e as its replacement
// (e.ParentID = oldID) in one atomic step, unlike the original. A missing
// old entry is ErrNotFound and a taken new id ErrConflict; either way
// nothing changes.
func (s *Store) Supersede(ctx context.Context, oldID string, e *Entry) (string, error) {
	if !ValidID(oldID) {
		return "", fmt.Errorf("blackboard: supersede %s: %w: bad id", oldID, ErrInvalid)
	}
	if e == nil {
		return "", fmt.Errorf("blackboard: supersede %s: %w: nil entry", oldID, ErrInvalid)
	}
	now := s.clock.Now()
	e.ParentID = oldID
	it, err := s.prepare(e, now)
	if err != nil {
		return "", fmt.Errorf("blackboard: supersede %s: %w", oldID, err)
	}
	count, err := s.supersede(ctx, now, oldID, it)
	if err != nil {
		return "", fmt.Errorf("blackboard: supersede %s: %w", oldID, err)
	}
	s.enforceCapacity(ctx, now, count, e.ID)
	return e.ID, nil
}

// Remove deletes an entry and emits blackboard.entry.removed with reason
// ("explicit" when empty).
func (s *Store) Remove(ctx context.Context, id, reason string) error {
	if !ValidID(id) {
		return fmt.Errorf("blackboard: remove %s: %w: bad id", id, ErrInvalid)
	}
	reason = cmp.Or(reason, "explicit")
	for range 8 {
		v, err := s.lookup(ctx, id)
		if err != nil {
			return fmt.Errorf("blackboard: remove %s: %w", id, err)
		}
		n, err := s.remove(ctx, s.clock.Now(), v, reason, 0)
		if err != nil {
			return fmt.Errorf("blackboard: remove %s: %w", id, err)
		}
		if n == 1 {
			return nil
		}
		// codeStale: the priority changed between lookup and remove; retry.
	}
	return fmt.Errorf("blackboard: remove %s: %w: entry keeps changing", id, ErrConflict)
}

// lookup reads what remove.lua needs to name an entry's index keys.
func (s *Store) lookup(ctx context.Context, id string) (victim, error) {
	f, err := s.rdb.HMGet(ctx, s.keys.Entry(id), "topic", "source_module", "priority").Result()
	if err != nil {
		return victim{}, err
	}
	topic, ok := f[0].(string)
	if !ok {
		return victim{}, ErrNotFound
	}
	source, _ := f[1].(string)
	v := victim{id: id, topic: topic, source: source, prio: Normal}
	if p, ok := f[2].(string); ok {
		n, err := strconv.Atoi(p)
		if err != nil {
			return victim{}, fmt.Errorf("%w: priority %q", ErrInvalid, p)
		}
		v.prio = Priority(n)
	}
	return v, nil
}

// Consume marks an ACTIVE entry consumed, emits the updated event and, if
// ack is given, acknowledges that stream message, all in one step.
// Consuming an entry that is already consumed only acknowledges (so a
// redelivered message is harmless). Any other status is ErrConflict and
// acknowledges nothing. It does not look at the TTL.
func (s *Store) Consume(ctx context.Context, id string, ack *StreamAck) error {
	if !ValidID(id) {
		return fmt.Errorf("blackboard: consume %s: %w: bad id", id, ErrInvalid)
	}
	if err := s.checkAck(ack); err != nil {
		return fmt.Errorf("blackboard: consume %s: %w", id, err)
	}
	if _, err := s.claim(ctx, s.clock.Now(), id, ack); err != nil {
		return fmt.Errorf("blackboard: consume %s: %w", id, err)
	}
	return nil
}

// Expire marks an ACTIVE entry expired now, whatever its TTL, emits
// blackboard.entry.expired and, if ack is given, acknowledges that stream
// message, all in one step. Expiring an already expired entry only
// acknowledges; any other status is ErrConflict.
func (s *Store) Expire(ctx context.Context, id string, ack *StreamAck) error {
	if !ValidID(id) {
		return fmt.Errorf("blackboard: expire %s: %w: bad id", id, ErrInvalid)
	}
	if err := s.checkAck(ack); err != nil {
		return fmt.Errorf("blackboard: expire %s: %w", id, err)
	}
	if _, err := s.expire(ctx, s.clock.Now(), id, false, ack); err != nil {
		return fmt.Errorf("blackboard: expire %s: %w", id, err)
	}
	return nil
}

// enforceCapacity evicts after a post that left the board over MaxEntries.
// The post has succeeded by then, so failures are logged (the sweeper
// retries), not returned.
func (s *Store) enforceCapacity(ctx context.Context, now time.Time, count int64, posted ...string) {
	if s.maxEntries < 0 || count <= int64(s.maxEntries) {
		return
	}
	if _, err := s.evict(ctx, now, posted); err != nil {
		s.log.Warn("eviction after post failed", "entry_id", posted[0], "err", err)
	}
}

// evict removes entries while the board holds more than MaxEntries: the
// oldest LOW first, then NORMAL, then HIGH; never CRITICAL (the cap is then
// exceeded and a warning logged). Ids in exclude (just posted) are spared,
// as the original evicted before inserting. Each removal is one remove.lua
// call guarded by the count, so concurrent evictors never overshoot.
func (s *Store) evict(ctx context.Context, now time.Time, exclude []string) (int, error) {
	evicted := 0
	for misses := 0; misses < 16; {
		v, ok, err := s.pickVictim(ctx, exclude)
		if err != nil {
			return evicted, err
		}
		if !ok {
			s.log.Warn("board over capacity with only CRITICAL entries left; not evicting",
				"max_entries", s.maxEntries)
			return evicted, nil
		}
		n, err := s.remove(ctx, now, v, "evicted", s.maxEntries)
		switch {
		case errors.Is(err, ErrNotFound):
			misses++ // removed under us; pick again
		case err != nil:
			return evicted, err
		case n == 1:
			evicted++
			misses = 0
		case n == 0:
			return evicted, nil // at capacity
		default:
			misses++ // codeStale
		}
	}
	return evicted, fmt.Errorf("%w: eviction kept losing races", ErrConflict)
}

// pickVictim returns the oldest non-excluded entry of the lowest
// non-CRITICAL priority that has one.
func (s *Store) pickVictim(ctx context.Context, exclude []string) (victim, bool, error) {
	for p := Low; p < Critical; p++ {
		ids, err := s.rdb.ZRange(ctx, s.keys.Prio(p), 0, int64(len(exclude))).Result()
		if err != nil {
			return victim{}, false, err
		}
		for _, id := range ids {
			if slices.Contains(exclude, id) {
				continue
			}
			v, err := s.lookup(ctx, id)
			if errors.Is(err, ErrNotFound) {
				v = victim{id: id, prio: p} // remove.lua reports it gone
				return v, true, nil
			}
			return v, err == nil, err
		}
	}
	return victim{}, false, nil
}

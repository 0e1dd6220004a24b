package blackboard

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Each script is lua/lib.lua followed by its own file; the file's header
// lists its KEYS, ARGV and return values. There is one method per script,
// named after it, which maps return codes to sentinel errors. Every script
// takes ARGV[1] now, ARGV[2] an event id prefix and ARGV[3] the events MAXLEN
// (see head).

var (
	//go:embed lua/lib.lua
	libLua string
	//go:embed lua/post.lua
	postLua string
	//go:embed lua/supersede.lua
	supersedeLua string
	//go:embed lua/update.lua
	updateLua string
	//go:embed lua/claim.lua
	claimLua string
	//go:embed lua/expire.lua
	expireLua string
	//go:embed lua/sweep.lua
	sweepLua string
	//go:embed lua/remove.lua
	removeLua string
	//go:embed lua/retire.lua
	retireLua string
	//go:embed lua/register_module.lua
	registerModuleLua string
	//go:embed lua/unregister_module.lua
	unregisterModuleLua string
)

// The scripts are immutable after package init.
var (
	postScript             = redis.NewScript(libLua + postLua)
	supersedeScript        = redis.NewScript(libLua + supersedeLua)
	updateScript           = redis.NewScript(libLua + updateLua)
	claimScript            = redis.NewScript(libLua + claimLua)
	expireScript           = redis.NewScript(libLua + expireLua)
	sweepScript            = redis.NewScript(libLua + sweepLua)
	removeScript           = redis.NewScript(libLua + removeLua)
	retireScript           = redis.NewScript(libLua + retireLua)
	registerModuleScript   = redis.NewScript(libLua + registerModuleLua)
	unregisterModuleScript = redis.NewScript(libLua + unregisterModuleLua)
)

// Return codes shared with lib.lua.
const (
	codeNotFound = -1
	codeConflict = -2
	codeStale    = -3
)

// head is ARGV[1..3] of every script: now, a fresh 24-hex event id prefix,
// and the events stream MAXLEN.
func (s *Store) head(now time.Time) []any { return s.appendHead(make([]any, 0, 8), now) }

// appendHead appends head(now) to args.
func (s *Store) appendHead(args []any, now time.Time) []any {
	return append(args, formatFloat(epoch(now)), NewID()[:24], s.eventsMaxLen)
}

// retentionArg is the retention ARGV of the scripts that can make an entry
// expired: seconds, or -1 to keep expired entries forever.
func (s *Store) retentionArg() string {
	if s.retention < 0 {
		return "-1"
	}
	return formatFloat(s.retention.Seconds())
}

// run runs a script and returns its reply as a slice.
func (s *Store) run(ctx context.Context, sc *redis.Script, keys []string, args []any) ([]any, error) {
	v, err := sc.Run(ctx, s.rdb, keys, args...).Result()
	if err != nil {
		return nil, err
	}
	r, ok := v.([]any)
	if !ok || len(r) == 0 {
		return nil, fmt.Errorf("unexpected script reply %v", v)
	}
	return r, nil
}

// code reads element i of a script reply as an integer.
func code(r []any, i int) int64 {
	if i < len(r) {
		if n, ok := r[i].(int64); ok {
			return n
		}
	}
	return 0
}

// statusErr maps a {CONFLICT, status} or {NOT_FOUND} reply to an error.
func statusErr(r []any) error {
	switch code(r, 0) {
	case codeNotFound:
		return ErrNotFound
	case codeConflict:
		if len(r) > 1 {
			return fmt.Errorf("%w: status is %v", ErrConflict, r[1])
		}
		return ErrConflict
	}
	return nil
}

// postItem is one entry ready for post.lua or supersede.lua.
type postItem struct {
	e    *Entry
	args []any  // the 16 per-entry ARGV values
	lane string // the intake lane key of a compute request, else ""
}

// entryKeyCount is how many KEYS one entry takes in post.lua (ENTRY_KEYS).
const entryKeyCount = 4

// entryKeys are an entry's KEYS in post.lua and supersede.lua: its HASH,
// topic and source indexes, and its intake lane (the topics SET, untouched,
// for an entry that has none).
func (k Keys) entryKeys(it postItem) []string {
	lane := it.lane
	if lane == "" {
		lane = k.Topics()
	}
	return []string{k.Entry(it.e.ID), k.Topic(it.e.Topic), k.Source(it.e.SourceModule), lane}
}

// post runs post.lua. It returns the index of an entry whose id is taken
// (-1 when all were written) and the entry count after the write.
func (s *Store) post(ctx context.Context, now time.Time, items []postItem) (taken int, count int64, err error) {
	keys := append(make([]string, 0, len(s.common)+entryKeyCount*len(items)), s.common...)
	args := append(s.head(now), len(items), s.retentionArg())
	for _, it := range items {
		keys = append(keys, s.keys.entryKeys(it)...)
		args = append(args, it.args...)
	}
	r, err := s.run(ctx, postScript, keys, args)
	if err != nil {
		return -1, 0, err
	}
	if code(r, 0) == 0 {
		return int(code(r, 1)) - 1, 0, nil
	}
	return -1, code(r, 1), nil
}

// supersede runs supersede.lua and returns the entry count after the write.
func (s *Store) supersede(ctx context.Context, now time.Time, oldID string, it postItem) (int64, error) {
	keys := append(slices.Clip(s.common), s.keys.Entry(oldID))
	keys = append(keys, s.keys.entryKeys(it)...)
	args := append(s.head(now), oldID, s.retentionArg())
	args = append(args, it.args...)
	r, err := s.run(ctx, supersedeScript, keys, args)
	if err != nil {
		return 0, err
	}
	if err := statusErr(r); err != nil {
		return 0, err
	}
	return code(r, 1), nil
}

// update runs update.lua with field/value pairs and returns how many fields
// changed.
func (s *Store) update(ctx context.Context, now time.Time, id string, expect Status, ev *Event, unlist string, guard *Guard, pairs []any) (int64, error) {
	keys := append([]string{s.keys.Entry(id), s.keys.Expiry(), s.keys.Events()}, s.keys.prios()...)
	keys = append(keys, s.keys.Retire())
	args := append(s.head(now), id, string(expect), s.retentionArg())
	if ev != nil {
		args = append(args, ev.Type, ev.ID, ev.Source, formatFloat(ev.Timestamp), string(ev.Payload))
	} else {
		args = append(args, "", "", "", "", "")
	}
	args = append(args, "", "", "") // no Unlist, no Guard
	if unlist != "" {
		keys = append(keys, unlist)
		args[len(args)-3] = "1"
	}
	if guard != nil {
		keys = append(keys, guard.Key)
		args[len(args)-2], args[len(args)-1] = guard.Field, guard.Value
	}
	r, err := s.run(ctx, updateScript, keys, append(args, pairs...))
	if err != nil {
		return 0, err
	}
	if code(r, 0) == codeStale {
		return 0, ErrStale
	}
	if err := statusErr(r); err != nil {
		return 0, err
	}
	return code(r, 0), nil
}

// claim runs claim.lua; it reports whether the entry moved to consumed.
func (s *Store) claim(ctx context.Context, now time.Time, id string, ack *StreamAck) (bool, error) {
	keys := []string{s.keys.Entry(id), s.keys.Expiry(), s.keys.Events()}
	args := append(s.head(now), id, "", "")
	if ack != nil {
		keys = append(keys, ack.Stream)
		args[4], args[5] = ack.Group, ack.MessageID
	}
	r, err := s.run(ctx, claimScript, keys, args)
	if err != nil {
		return false, err
	}
	if err := statusErr(r); err != nil {
		return false, err
	}
	return code(r, 0) == 1, nil
}

// expire runs expire.lua; it reports whether the entry moved to expired.
func (s *Store) expire(ctx context.Context, now time.Time, id string, checkTTL bool, ack *StreamAck) (bool, error) {
	keys := []string{s.keys.Entry(id), s.keys.Expiry(), s.keys.Events(), s.keys.Stats(), s.keys.Retire()}
	check := "0"
	if checkTTL {
		check = "1"
	}
	args := append(s.head(now), id, check, s.retentionArg(), "", "")
	if ack != nil {
		keys = append(keys, ack.Stream)
		args[6], args[7] = ack.Group, ack.MessageID
	}
	r, err := s.run(ctx, expireScript, keys, args)
	if err != nil {
		return false, err
	}
	if err := statusErr(r); err != nil {
		return false, err
	}
	return code(r, 0) == 1, nil
}

// sweep runs sweep.lua over ids read from the expiry index.
func (s *Store) sweep(ctx context.Context, now time.Time, ids []string) (expired, dropped int64, err error) {
	keys := []string{s.keys.Expiry(), s.keys.Events(), s.keys.Stats(), s.keys.Retire()}
	args := append(s.head(now), s.retentionArg())
	for _, id := range ids {
		keys = append(keys, s.keys.Entry(id))
		args = append(args, id)
	}
	r, err := s.run(ctx, sweepScript, keys, args)
	if err != nil {
		return 0, 0, err
	}
	return code(r, 0), code(r, 1), nil
}

// victim is what remove.lua needs to name an entry's index keys.
type victim struct {
	id, topic, source string
	prio              Priority
}

// remove runs remove.lua. capacity > 0 removes only while the board holds
// more than capacity entries. It returns 1 (removed), 0 (not needed) or
// codeStale; a missing entry is ErrNotFound.
func (s *Store) remove(ctx context.Context, now time.Time, v victim, reason string, capacity int) (int64, error) {
	keys := []string{s.keys.Entry(v.id), s.keys.Topic(v.topic), s.keys.Source(v.source),
		s.keys.Prio(v.prio), s.keys.All(), s.keys.Expiry(), s.keys.Events(), s.keys.Stats(), s.keys.Retire()}
	args := append(s.head(now), v.id, v.topic, v.source, strconv.Itoa(int(v.prio)), reason, max(capacity, 0))
	r, err := s.run(ctx, removeScript, keys, args)
	if err != nil {
		return 0, err
	}
	if err := statusErr(r); err != nil {
		return 0, err
	}
	return code(r, 0), nil
}

// retire runs retire.lua over entries read from the retire index (topic and
// source as read; empty for an entry found gone). It returns how many were
// removed and how many left the index otherwise.
func (s *Store) retire(ctx context.Context, now time.Time, vs []victim) (retired, dropped int64, err error) {
	keys := append([]string{s.keys.Retire(), s.keys.All(), s.keys.Expiry(), s.keys.Events(), s.keys.Stats()},
		s.keys.prios()...)
	args := s.head(now)
	for _, v := range vs {
		keys = append(keys, s.keys.Entry(v.id), s.keys.Topic(v.topic), s.keys.Source(v.source))
		args = append(args, v.id, v.topic, v.source)
	}
	r, err := s.run(ctx, retireScript, keys, args)
	if err != nil {
		return 0, 0, err
	}
	return code(r, 0), code(r, 1), nil
}

// registerModule runs register_module.lua.
func (s *Store) registerModule(ctx context.Context, now time.Time, name, info, payload string) error {
	args := append(s.head(now), name, info, payload)
	r, err := s.run(ctx, registerModuleScript, []string{s.keys.Modules(), s.keys.Events()}, args)
	if err != nil {
		return err
	}
	return statusErr(r)
}

// unregisterModule runs unregister_module.lua.
func (s *Store) unregisterModule(ctx context.Context, now time.Time, name string) error {
	args := append(s.head(now), name)
	r, err := s.run(ctx, unregisterModuleScript, []string{s.keys.Modules(), s.keys.Events()}, args)
	if err != nil {
		return err
	}
	return statusErr(r)
}

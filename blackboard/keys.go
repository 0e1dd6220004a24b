package blackboard

import (
	"strconv"
	"strings"
)

// Names shared with the broker.
const (
	// InboxGroup is the consumer group on every intake lane.
	InboxGroup = "compute-broker"
	// RequestTopic is the topic whose entries are also appended to an intake lane.
	RequestTopic = "compute.request"
	// NumLanes is the number of intake lanes (request priorities 0..9).
	NumLanes = 10
)

// Keys builds every Redis key of one board. All keys share the prefix
// asi:bb:{<board>}, whose hash tag keeps a board in one Cluster slot, so
// every script and MULTI over them stays legal. This file is the only place
// key names are spelled; the trailing comment on each names its Redis type.
type Keys struct {
	prefix string // "asi:bb:{<board>}"
}

// NewKeys returns the keys of board namespace.
func NewKeys(namespace string) Keys {
	return Keys{prefix: "asi:bb:{" + namespace + "}"}
}

// Prefix is P, the part every key of the board starts with.
func (k Keys) Prefix() string { return k.prefix }

// owns reports whether key belongs to this board.
func (k Keys) owns(key string) bool { return strings.HasPrefix(key, k.prefix+":") }

// Entry is one entry, encoded field by field (see Entry.EncodeHash).
func (k Keys) Entry(id string) string { return k.prefix + ":entry:" + id } // HASH

// Topics holds every topic that has had entries.
func (k Keys) Topics() string { return k.prefix + ":topics" } // SET

// Topic indexes a topic's entries: member entry id, score timestamp.
func (k Keys) Topic(topic string) string { return k.prefix + ":topic:" + topic } // ZSET

// Source indexes a source module's entries: member entry id, score timestamp.
func (k Keys) Source(module string) string { return k.prefix + ":source:" + module } // ZSET

// Prio indexes one priority's entries in eviction order: score timestamp.
func (k Keys) Prio(p Priority) string { return k.prefix + ":prio:" + strconv.Itoa(int(p)) } // ZSET

// All indexes every entry: score timestamp; its size is the capacity count.
func (k Keys) All() string { return k.prefix + ":all" } // ZSET

// Expiry holds ACTIVE entries with a TTL: score timestamp + ttl.
func (k Keys) Expiry() string { return k.prefix + ":expiry" } // ZSET

// Retire holds entries in status expired that the sweeper will remove:
// score expired_at + Retention (only while Retention >= 0).
func (k Keys) Retire() string { return k.prefix + ":retire" } // ZSET

// Events is the lifecycle and module event stream (approximately capped).
func (k Keys) Events() string { return k.prefix + ":events" } // STREAM

// Modules maps module name to ModuleInfo JSON.
func (k Keys) Modules() string { return k.prefix + ":modules" } // HASH

// Stats holds the counters total_posted, total_removed, total_evicted,
// total_expired, total_retired.
func (k Keys) Stats() string { return k.prefix + ":stats" } // HASH

// EngineState maps compute adapter node name to the scheduling engine's
// JSON checkpoint (engine.State: decayed usage, fair-queuing tags), so fair
// share survives an adapter restart (written by package jobs).
func (k Keys) EngineState() string { return k.prefix + ":engine:state" } // HASH

// Inbox is legacy (version 1, shared) intake lane 0..NumLanes-1 for
// compute.request entries (never trimmed). Only a trusted board reads it.
func (k Keys) Inbox(lane int) string { return k.prefix + ":inbox:compute:p" + strconv.Itoa(lane) } // STREAM

// ModuleInbox is module's own intake lane 0..NumLanes-1 (version 2): the
// module name in the key is what a Redis ACL confines a module's user to,
// so the broker takes the poster's identity from it. module must be a
// ValidModule name.
func (k Keys) ModuleInbox(module string, lane int) string {
	return k.prefix + ":inbox:compute:m:" + module + ":p" + strconv.Itoa(lane) // STREAM
}

// ModuleInboxPrefix is what every intake lane of module starts with (the
// ACL key pattern is this followed by "*").
func (k Keys) ModuleInboxPrefix(module string) string { return k.ModuleInboxes() + module + ":" }

// ModuleInboxes is what every per-module intake lane starts with: the rest
// of the key is a lane registry member (LaneMember).
func (k Keys) ModuleInboxes() string { return k.prefix + ":inbox:compute:m:" }

// RequestLane is the intake lane a compute.request entry of source module
// is appended to: the module's own lane when module is a ValidModule name,
// else the legacy shared lane.
func (k Keys) RequestLane(module string, lane int) string {
	if ValidModule(module) {
		return k.ModuleInbox(module, lane)
	}
	return k.Inbox(lane)
}

// InboxLanes registers the per-module intake lanes that exist: members
// "<module>:p<lane>", added by the poster in the same step as its first
// message on that lane. The broker validates each member; it is only a
// hint of where to read.
func (k Keys) InboxLanes() string { return k.prefix + ":inbox:compute:lanes" } // SET

// LaneMember is the InboxLanes member of module's lane.
func LaneMember(module string, lane int) string { return module + ":p" + strconv.Itoa(lane) }

// ParseLaneMember splits an InboxLanes member; ok is false for anything
// that is not a ValidModule name and a lane 0..NumLanes-1.
func ParseLaneMember(m string) (module string, lane int, ok bool) {
	i := strings.LastIndexByte(m, ':')
	if i < 0 || len(m) != i+3 || m[i+1] != 'p' || m[i+2] < '0' || m[i+2] > '9' {
		return "", 0, false
	}
	module, lane = m[:i], int(m[i+2]-'0')
	return module, lane, ValidModule(module)
}

// Replayed holds "<message id> <lane key>" for each intake message an
// operator replayed from the dead letters (written by the adapter only; a
// replayed field in the message itself proves nothing).
func (k Keys) Replayed() string { return k.prefix + ":inbox:compute:replayed" } // SET

// DLQ holds dead-lettered intake messages.
func (k Keys) DLQ() string { return k.prefix + ":inbox:compute:dlq" } // STREAM

// DLQWritten marks the intake messages whose dead letter is written but
// which are not yet acknowledged: field "<lane key>/<message id>", value
// the dead letter's id (so a redelivery never writes a second one).
func (k Keys) DLQWritten() string { return k.prefix + ":inbox:compute:dlq:written" } // HASH

// Job is the durable record of one job (owned by package jobs).
func (k Keys) Job(id string) string { return k.prefix + ":job:" + id } // HASH

// JobField is the key beside job id's record that holds one of the
// record's long fields as a STRING (package jobs chooses which: the request
// as posted, the latest explanation). Kept in the HASH, a field longer than
// Redis's hash-max-listpack-value (64 bytes by default) would make Redis
// keep the whole record as a hash table rather than a compact listpack.
// Scripts build it from the record's key: Job(id) + ":" + field (the same
// board, so the same Cluster slot).
func (k Keys) JobField(id, field string) string { return k.Job(id) + ":" + field } // STRING

// JobsIdem maps idempotency key to job id: the layout before keys were
// scoped per module and expired (still read, never written).
func (k Keys) JobsIdem() string { return k.prefix + ":jobs:idem" } // HASH

// JobIdem maps one source module's idempotency key to its job id; it
// expires with the job record's retention. The module's length prefix
// keeps ("a:b", "c") and ("a", "b:c") apart.
func (k Keys) JobIdem(module, key string) string {
	return k.JobIdemPrefix() + strconv.Itoa(len(module)) + ":" + module + ":" + key
} // STRING

// JobIdemPrefix is what every JobIdem key starts with (for scripts that
// build one from a job record).
func (k Keys) JobIdemPrefix() string { return k.prefix + ":jobs:idem:" }

// JobsActive holds jobs not yet terminal: member job id, score accepted_at.
func (k Keys) JobsActive() string { return k.prefix + ":jobs:active" } // ZSET

// JobsUnmirrored holds jobs whose latest change is not yet mirrored onto
// their job entry: member job id, score when it changed (epoch seconds).
func (k Keys) JobsUnmirrored() string { return k.prefix + ":jobs:unmirrored" } // ZSET

// common is the board-wide key list that post.lua and supersede.lua take as
// KEYS[1..11]: topics, all, expiry, events, stats, prio 0..3, retire, the
// intake lane registry.
func (k Keys) common() []string {
	keys := []string{k.Topics(), k.All(), k.Expiry(), k.Events(), k.Stats()}
	for p := Low; p <= Critical; p++ {
		keys = append(keys, k.Prio(p))
	}
	return append(keys, k.Retire(), k.InboxLanes())
}

// prios returns P:prio:0 .. P:prio:3.
func (k Keys) prios() []string {
	return []string{k.Prio(Low), k.Prio(Normal), k.Prio(High), k.Prio(Critical)}
}

// The pool's keys (package pool owns what they hold).

// PoolLease is the scheduler lease: a STRING "<epoch> <holder> <url>"
// with a PX expiry, renewed by the active scheduler.
func (k Keys) PoolLease() string { return k.prefix + ":pool:lease" } // STRING

// PoolEpoch is the fencing epoch: incremented on every lease acquisition,
// never expires. Every scheduler write checks it in the same Lua step.
func (k Keys) PoolEpoch() string { return k.prefix + ":pool:epoch" } // STRING (integer)

// PoolNodes maps a node name to its inventory JSON (written by its agent).
func (k Keys) PoolNodes() string { return k.prefix + ":pool:nodes" } // HASH

// PoolBeats holds each node's last heartbeat: member node, score epoch ms.
func (k Keys) PoolBeats() string { return k.prefix + ":pool:beats" } // ZSET

// PoolBoot records the reconciliation round of the Redis run the board is
// served by: run (the server's run_id), at, timeout, done (see package
// pool, lua/round.lua).
func (k Keys) PoolBoot() string { return k.prefix + ":pool:boot" } // HASH

// PoolBootPending holds the nodes that have not re-asserted their jobs in
// the current reconciliation round.
func (k Keys) PoolBootPending() string { return k.prefix + ":pool:boot:pending" } // SET

// NodeAssign is node's durable assignment channel (scheduler → agent).
func (k Keys) NodeAssign(node string) string { return k.prefix + ":pool:assign:" + node } // STREAM

// NodeJobs holds the IDs of the jobs assigned to node and not yet settled
// by its agent (so a restarted agent finds them, lost ones included).
func (k Keys) NodeJobs(node string) string { return k.prefix + ":pool:node:" + node + ":jobs" } // SET

// PoolReports is the agents' report stream to the scheduler: a job
// started, ended or went back to the queue (approximately capped).
func (k Keys) PoolReports() string { return k.prefix + ":pool:reports" } // STREAM

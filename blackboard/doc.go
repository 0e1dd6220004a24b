// Package blackboard is ASI:BUILD's Cognitive Blackboard kept in Redis.
// Modules post entries (topic, JSON data, confidence, priority, TTL, tags,
// provenance) and read them by topic, source or Query. Every change is one
// Lua script (lua/), so there is no lock and Go and Python processes can
// share a board. An entry's status moves from active to consumed,
// superseded, expired or retracted; the sweeper expires and evicts. Events
// go to one stream, replayed from a cursor and filtered by fnmatch pattern;
// compute.request entries also land on their module's own intake lane
// (Keys.ModuleInbox, registered in Keys.InboxLanes). Keys.ModuleACL gives
// the Redis ACL rules that confine a module's user to its own lanes and
// entry keys (ids "<module>:<32 hex>").
// docs/contract-draft.md fixes the names; keys.go alone builds them.
// Scripts of other packages that write entries in their own atomic step
// (the broker's one-step intake) are composed with lua/lib.lua (LuaLib,
// PostStep, Posted: compose.go) rather than copying it.
//
// # Deviations from the original
//
// Retention: the original keeps expired entries forever, and they count
// toward MaxEntries, so a long-running board fills with expired telemetry
// until capacity eviction starts removing NORMAL entries that modules still
// wait on. Here an entry that has been in status expired for longer than
// Config.Retention (default 1h) is removed by the sweeper, with
// blackboard.entry.removed {reason: "retention"} and the total_removed and
// total_retired counters. Whatever makes an entry expired (the sweeper,
// Expire, Get's lazy expiry, an Update or Post with status expired) also
// adds it to P:retire scored expired_at + Retention, so the sweeper reads
// only the due part of that index, never the keyspace; an entry that has
// left status expired by then just leaves the index. A negative Retention
// keeps expired entries forever, as the original did. Entries expired by a
// writer that does not maintain P:retire, or while Retention was negative,
// are never retired.
//
// Quiet sweeps: the original emits blackboard.sweep.complete on every
// sweep; here only a sweep that expired, retired or evicted an entry emits
// it (and only then counts active entries), so an idle board does not flood
// the capped events stream.
package blackboard

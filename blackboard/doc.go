// Package blackboard is ASI:BUILD's Cognitive Blackboard kept in Redis.
// Modules post entries (topic, JSON data, confidence, priority, TTL, tags,
// provenance) and read them by topic, source or Query. Every change is one
// Lua script (lua/), so there is no lock and Go and Python processes can
// share a board. An entry's status moves from active to consumed,
// superseded, expired or retracted; the sweeper expires and evicts. Events
// go to one stream, replayed from a cursor and filtered by fnmatch pattern;
// compute.request entries also land on the broker's intake lanes.
// docs/contract-draft.md fixes the names; keys.go alone builds them.
package blackboard

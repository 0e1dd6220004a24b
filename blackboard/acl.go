package blackboard

import (
	"fmt"
	"strings"
)

// ModuleACL returns the Redis ACL rules (ACL SETUSER arguments after the
// user name and password) that confine a module's Redis user to what a
// poster of compute requests needs on this board:
//
//   - read and write its own intake lanes (P:inbox:compute:m:<module>:*),
//     its own entries (P:entry:<module>:*) and its source index;
//   - write the shared indexes a post touches (topics, topic:*, prio:*,
//     all, expiry, events, stats, the lane registry): a module can disturb
//     these, and post events, but the adapter treats them as hints only;
//   - read every entry (job entries included: that is how it watches its
//     jobs), the source indexes, the module registry;
//   - nothing else: no job records (P:job:*, P:jobs:*), no dead letters, no
//     legacy shared lanes, no replay marks, no adapter or engine state;
//   - only the commands a redis-py poster uses: MULTI/EXEC/WATCH, HSET,
//     HGET(ALL), ZADD, ZREM, SADD, XADD, HINCRBY, reads, XREAD for
//     watching; no scripts, no DEL, no SCAN/KEYS, no pub/sub, no admin.
//
// module must be a ValidModule name.
func (k Keys) ModuleACL(module string) ([]string, error) {
	if !ValidModule(module) {
		return nil, fmt.Errorf("%w: module name %q: want 1 to %d of [A-Za-z0-9_.-]", ErrInvalid, module, MaxModuleLen)
	}
	g := globEscape
	rules := []string{"resetkeys", "resetchannels", "-@all"}
	for _, c := range moduleCommands {
		rules = append(rules, "+"+c)
	}
	rw := []string{
		g(k.ModuleInboxPrefix(module)) + "*",
		g(k.Entry(module+":")) + "*",
		g(k.Source(module)),
		g(k.Topics()), g(k.Topic("")) + "*", strings.TrimSuffix(g(k.Prio(Low)), "0") + "*",
		g(k.All()), g(k.Expiry()), g(k.Events()), g(k.Stats()), g(k.InboxLanes()),
	}
	for _, p := range rw {
		rules = append(rules, "~"+p)
	}
	for _, p := range []string{g(k.Entry("")) + "*", g(k.Source("")) + "*", g(k.Modules())} {
		rules = append(rules, "%R~"+p)
	}
	return rules, nil
}

// moduleCommands are the commands a module's user may run.
var moduleCommands = []string{
	// connection and transactions
	"ping", "echo", "hello", "auth", "select", "client|setname", "client|getname", "client|id",
	"multi", "exec", "discard", "watch", "unwatch",
	// writes a post or a retraction makes
	"hset", "hincrby", "sadd", "zadd", "zrem", "xadd",
	// reads
	"exists", "type", "hget", "hmget", "hgetall", "hexists", "hlen",
	"sismember", "smembers", "scard", "zcard", "zscore", "zrange", "zrangebyscore", "zrevrange",
	"zrevrangebyscore", "xrange", "xrevrange", "xread", "xlen",
}

// globEscape escapes the characters Redis glob patterns treat specially.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		switch c {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

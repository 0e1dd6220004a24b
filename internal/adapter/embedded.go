package adapter

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/proto"
	"github.com/alicebob/miniredis/v2/server"
)

// embeddedServer is the Redis-protocol blackboard that `make run` serves
// when no --redis URL is given: an in-process miniredis on a loopback
// address, so a Python module on the same machine can connect with
// redis-py. It keeps everything in memory; use a real Redis for
// durability.
//
// miniredis answers a few introspection commands that redis-py parses
// only in part, or not at all; a pre-command hook answers those instead
// (INFO with every section, XINFO STREAM with first-entry and last-entry,
// CONFIG GET, ROLE), and COMMAND DOCS, whose answer makes redis-cli abort,
// gets an error. The hook stands aside inside MULTI and after a SELECT
// of another database, where miniredis's own answer (or error) stands; the
// README lists what remains unsupported.
type embeddedServer struct {
	m       *miniredis.Miniredis
	started time.Time

	mu    sync.Mutex                     // guards peers and their state
	peers map[*server.Peer]*embeddedPeer // connections the hook has seen
}

// embeddedPeer is what the hook tracks of one connection.
type embeddedPeer struct {
	inTx     bool // between MULTI and EXEC/DISCARD: miniredis queues the commands
	otherDB  bool // a SELECT other than 0: the hook's reads would see db 0
	internal bool // the hook's own peer, reading through miniredis
}

// embeddedVersion is the Redis version the embedded server reports: the
// one miniredis's HELLO gives.
const embeddedVersion = "8.4.0"

func startEmbedded(addr string) (*embeddedServer, error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr(addr); err != nil {
		return nil, fmt.Errorf("embedded blackboard on %s: %w (pick another with --embedded ADDR, or port 0 for any free one)", addr, err)
	}
	e := &embeddedServer{m: m, started: time.Now(), peers: map[*server.Peer]*embeddedPeer{}}
	m.Server().SetPreHook(e.hook)
	return e, nil
}

func (e *embeddedServer) Addr() string { return e.m.Addr() }
func (e *embeddedServer) Close()       { e.m.Close() }

// hook runs before miniredis dispatches each command (cmd in upper case);
// it returns true when it has answered the command itself.
func (e *embeddedServer) hook(c *server.Peer, cmd string, args ...string) bool {
	e.mu.Lock()
	p := e.peerLocked(c)
	switch cmd {
	case "MULTI":
		p.inTx = true
	case "EXEC", "DISCARD":
		p.inTx = false
	case "RESET":
		p.inTx, p.otherDB = false, false
	case "SELECT":
		p.otherDB = len(args) != 1 || args[0] != "0"
	}
	stand := p.inTx || p.otherDB || p.internal
	e.mu.Unlock()
	if stand {
		return false
	}
	switch {
	case cmd == "INFO":
		e.info(c, args)
	case cmd == "XINFO" && len(args) == 2 && strings.EqualFold(args[0], "STREAM"):
		return e.xinfoStream(c, args[1])
	case cmd == "CONFIG" && len(args) >= 2 && strings.EqualFold(args[0], "GET"):
		e.configGet(c, args[1:])
	case cmd == "COMMAND" && len(args) >= 1 && strings.EqualFold(args[0], "DOCS"):
		// miniredis answers with COMMAND's array, which makes redis-cli
		// abort at start; an error makes it use its built-in help.
		c.WriteError("ERR COMMAND DOCS is not served by the embedded blackboard")
	case cmd == "ROLE" && len(args) == 0:
		c.WriteLen(3)
		c.WriteBulk("master")
		c.WriteInt(0)
		c.WriteLen(0)
	default:
		return false
	}
	return true
}

// peerLocked returns the state of connection c, tracking it until it
// closes. e.mu is held.
func (e *embeddedServer) peerLocked(c *server.Peer) *embeddedPeer {
	p, ok := e.peers[c]
	if !ok {
		p = &embeddedPeer{}
		e.peers[c] = p
		c.OnDisconnect(func() {
			e.mu.Lock()
			delete(e.peers, c)
			e.mu.Unlock()
		})
	}
	return p
}

// do runs one command through miniredis (database 0, its own locking) and
// returns the parsed reply: string, int, error, nil or []any.
func (e *embeddedServer) do(args ...string) any {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	c := server.NewPeer(w)
	e.mu.Lock()
	e.peers[c] = &embeddedPeer{internal: true}
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.peers, c)
		e.mu.Unlock()
	}()
	e.m.Server().Dispatch(c, args)
	c.Flush()
	v, err := proto.Parse(buf.String())
	if err != nil {
		return err
	}
	if s, ok := v.(string); ok && s == "$-1\r\n" {
		return nil // proto.Parse returns a null bulk string as its text
	}
	return v
}

// xinfoStream answers XINFO STREAM key as Redis does (length,
// last-generated-id, groups, first-entry, last-entry; redis-py needs the
// last two). It leaves errors (no such key, wrong type) to miniredis.
func (e *embeddedServer) xinfoStream(c *server.Peer, key string) bool {
	info, ok := e.do("XINFO", "STREAM", key).([]any)
	if !ok {
		return false
	}
	fields := map[string]any{}
	for i := 0; i+1 < len(info); i += 2 {
		if k, ok := info[i].(string); ok {
			fields[k] = info[i+1]
		}
	}
	length, _ := fields["length"].(int)
	lastID, _ := fields["last-generated-id"].(string)
	groups, _ := e.do("XINFO", "GROUPS", key).([]any)
	first, _ := e.do("XRANGE", key, "-", "+", "COUNT", "1").([]any)
	last, _ := e.do("XREVRANGE", key, "+", "-", "COUNT", "1").([]any)

	c.WriteMapLen(5)
	c.WriteBulk("length")
	c.WriteInt(length)
	c.WriteBulk("last-generated-id")
	c.WriteBulk(lastID)
	c.WriteBulk("groups")
	c.WriteInt(len(groups))
	c.WriteBulk("first-entry")
	writeStreamEntry(c, first)
	c.WriteBulk("last-entry")
	writeStreamEntry(c, last)
	return true
}

// writeStreamEntry writes the only entry of an XRANGE ... COUNT 1 reply,
// or a null when there is none.
func writeStreamEntry(c *server.Peer, reply []any) {
	if len(reply) != 1 {
		c.WriteNull()
		return
	}
	ent, _ := reply[0].([]any)
	if len(ent) != 2 {
		c.WriteNull()
		return
	}
	id, _ := ent[0].(string)
	kv, _ := ent[1].([]any)
	c.WriteLen(2)
	c.WriteBulk(id)
	c.WriteLen(len(kv))
	for _, s := range kv {
		str, _ := s.(string)
		c.WriteBulk(str)
	}
}

// infoSections are INFO's sections, in Redis's order; INFO with no
// section, "default", "all" or "everything" gives them all.
var infoSections = []string{"server", "clients", "memory", "persistence", "stats", "replication", "keyspace"}

// info answers INFO [section ...] with the sections redis-py callers read;
// like Redis, it answers an unknown section with nothing.
func (e *embeddedServer) info(c *server.Peer, args []string) {
	want := map[string]bool{}
	for _, a := range args {
		switch a = strings.ToLower(a); a {
		case "default", "all", "everything":
			for _, s := range infoSections {
				want[s] = true
			}
		default:
			want[a] = true
		}
	}
	if len(args) == 0 {
		for _, s := range infoSections {
			want[s] = true
		}
	}
	srv := e.m.Server()
	var b strings.Builder
	section := func(title string, kv ...string) {
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString("# " + title + "\r\n")
		for i := 0; i+1 < len(kv); i += 2 {
			b.WriteString(kv[i] + ":" + kv[i+1] + "\r\n")
		}
	}
	for _, s := range infoSections {
		if !want[s] {
			continue
		}
		switch s {
		case "server":
			up := int(time.Since(e.started).Seconds())
			section("Server", "redis_version", embeddedVersion, "redis_mode", "standalone",
				"server_name", "miniredis", "os", runtime.GOOS, "arch_bits", strconv.Itoa(strconv.IntSize),
				"process_id", strconv.Itoa(os.Getpid()), "tcp_port", e.m.Port(),
				"uptime_in_seconds", strconv.Itoa(up), "uptime_in_days", strconv.Itoa(up/86400))
		case "clients":
			section("Clients", "connected_clients", strconv.Itoa(srv.ClientsLen()))
		case "memory":
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			section("Memory", "used_memory", strconv.FormatUint(ms.HeapAlloc, 10),
				"maxmemory", "0", "maxmemory_policy", "noeviction")
		case "persistence":
			section("Persistence", "loading", "0", "rdb_changes_since_last_save", "0",
				"rdb_bgsave_in_progress", "0", "aof_enabled", "0")
		case "stats":
			section("Stats", "total_connections_received", strconv.Itoa(srv.TotalConnections()),
				"total_commands_processed", strconv.Itoa(srv.TotalCommands()))
		case "replication":
			section("Replication", "role", "master", "connected_slaves", "0")
		case "keyspace":
			db := e.m.DB(0)
			keys := db.Keys()
			expires := 0
			for _, k := range keys {
				if db.TTL(k) > 0 {
					expires++
				}
			}
			if len(keys) > 0 {
				section("Keyspace", "db0", fmt.Sprintf("keys=%d,expires=%d,avg_ttl=0", len(keys), expires))
			} else {
				section("Keyspace")
			}
		}
	}
	c.WriteBulk(b.String())
}

// embeddedConfig is what CONFIG GET reports: the settings of an in-memory
// server that never evicts or persists.
var embeddedConfig = map[string]string{
	"appendonly":             "no",
	"databases":              "16",
	"maxmemory":              "0",
	"maxmemory-policy":       "noeviction",
	"notify-keyspace-events": "",
	"save":                   "",
	"timeout":                "0",
}

// configGet answers CONFIG GET pattern ... with the settings whose names
// match (Redis glob), as a map; unknown names give nothing, as in Redis.
func (e *embeddedServer) configGet(c *server.Peer, patterns []string) {
	var names []string
	for name := range embeddedConfig {
		for _, p := range patterns {
			if ok, _ := path.Match(strings.ToLower(p), name); ok {
				names = append(names, name)
				break
			}
		}
	}
	slices.Sort(names)
	c.WriteMapLen(len(names))
	for _, n := range names {
		c.WriteBulk(n)
		c.WriteBulk(embeddedConfig[n])
	}
}

package adapter

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
)

// startTestEmbedded starts the embedded blackboard on a free port.
func startTestEmbedded(t *testing.T) *embeddedServer {
	t.Helper()
	e, err := startEmbedded("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// redisPy is Debian's python3 with redis-py, as module authors run it.
func redisPy(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if path, err := exec.LookPath(p); err == nil && exec.Command(path, "-c", "import redis").Run() == nil {
			return path
		}
	}
	t.Fatal("python3 with redis-py not found: install it with `sudo apt-get install -y python3-redis` (or run `make test`)")
	return ""
}

// embeddedProbe makes the redis-py calls that miniredis alone answers
// with an error or a reply redis-py cannot parse, and prints what they
// returned as one JSON object.
const embeddedProbe = `
import json, sys, redis
host, port = sys.argv[1].rsplit(":", 1)
r = redis.Redis(host=host, port=int(port), decode_responses=True)
out = {}
out["info_server_version"] = r.info("server")["redis_version"]
info = r.info()
out["info_has"] = sorted(k for k in ("redis_version", "connected_clients", "used_memory", "role", "loading")
                         if k in info)
out["info_unknown_section"] = r.info("nonsense")
a = r.xadd("s", {"a": "1"})
b = r.xadd("s", {"b": "2", "c": "3"})
r.xgroup_create("s", "g", id="0")
x = r.xinfo_stream("s")
out["xinfo"] = {k: x[k] for k in ("length", "groups", "first-entry", "last-entry")}
out["xinfo_ids"] = [x["first-entry"][0] == a, x["last-entry"][0] == b, x["last-generated-id"] == b]
r.xadd("empty", {"a": "1"}, id="1-1")
r.xdel("empty", "1-1")
e = r.xinfo_stream("empty")
out["xinfo_empty"] = {k: e[k] for k in ("length", "first-entry", "last-entry", "last-generated-id")}
try:
    r.xinfo_stream("missing")
    out["xinfo_missing"] = "no error"
except redis.ResponseError:
    out["xinfo_missing"] = "error"
out["keyspace_keys"] = r.info("keyspace")["db0"]["keys"]
out["config"] = r.config_get("maxmemory*")
out["role"] = r.execute_command("ROLE")
print(json.dumps(out))
`

// TestEmbeddedServesRedisPy runs redis-py's introspection calls against the
// embedded blackboard: INFO with a section, and XINFO STREAM (redis-py needs
// first-entry and last-entry) failed on miniredis alone.
func TestEmbeddedServesRedisPy(t *testing.T) {
	t.Parallel()
	e := startTestEmbedded(t)
	out, err := exec.Command(redisPy(t), "-c", embeddedProbe, e.Addr()).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-py: %v\n%s", err, out)
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := map[string]any{
		"info_server_version":  embeddedVersion,
		"info_has":             []any{"connected_clients", "loading", "redis_version", "role", "used_memory"},
		"info_unknown_section": map[string]any{},
		"xinfo": map[string]any{
			"length": 2.0, "groups": 1.0,
			"first-entry": []any{got["xinfo"].(map[string]any)["first-entry"].([]any)[0], map[string]any{"a": "1"}},
			"last-entry":  []any{got["xinfo"].(map[string]any)["last-entry"].([]any)[0], map[string]any{"b": "2", "c": "3"}},
		},
		"xinfo_ids":     []any{true, true, true},
		"xinfo_empty":   map[string]any{"length": 0.0, "first-entry": nil, "last-entry": nil, "last-generated-id": "1-1"},
		"xinfo_missing": "error",
		"keyspace_keys": 2.0,
		"config":        map[string]any{"maxmemory": "0", "maxmemory-policy": "noeviction"},
		"role":          []any{"master", 0.0, []any{}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("redis-py against the embedded blackboard (-want +got):\n%s", diff)
	}
}

// TestEmbeddedHookStandsAside checks that the hook leaves commands inside
// MULTI, and on a database other than 0, to miniredis: it must not answer
// out of turn, or from the wrong database.
func TestEmbeddedHookStandsAside(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := startTestEmbedded(t)
	rdb := redis.NewClient(&redis.Options{Addr: e.Addr(), Protocol: 2})
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "s", ID: "1-1", Values: []string{"a", "1"}}).Err(); err != nil {
		t.Fatal(err)
	}

	// Inside MULTI: miniredis queues XINFO and answers it at EXEC, with
	// its own (shorter) reply.
	var info *redis.Cmd
	if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "k", "v", 0)
		info = p.Do(ctx, "XINFO", "STREAM", "s")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]any{"length", int64(1), "last-generated-id", "1-1"}, info.Val()); diff != "" {
		t.Errorf("XINFO STREAM in MULTI (-want +got):\n%s", diff)
	}
	// After EXEC the hook answers again.
	full, err := rdb.Do(ctx, "XINFO", "STREAM", "s").Slice()
	if err != nil || len(full) != 10 {
		t.Errorf("XINFO STREAM after EXEC = %v, %v; want 5 fields", full, err)
	}

	// On database 1 the stream of database 0 is not there.
	conn := rdb.Conn()
	t.Cleanup(func() { conn.Close() })
	if err := conn.Select(ctx, 1).Err(); err != nil {
		t.Fatal(err)
	}
	if err := conn.Do(ctx, "XINFO", "STREAM", "s").Err(); err == nil {
		t.Errorf("XINFO STREAM on db 1 found db 0's stream")
	}
}

// TestEmbeddedServesRedisCli feeds redis-cli commands on standard input, as
// the README's recipe does: redis-cli asks for COMMAND DOCS first, and
// aborted on miniredis's answer.
func TestEmbeddedServesRedisCli(t *testing.T) {
	t.Parallel()
	e := startTestEmbedded(t)
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatal("redis-cli not found: install it with `sudo apt-get install -y redis-tools` (or run `make test`)")
	}
	_, port, _ := strings.Cut(e.Addr(), ":")
	cmd := exec.Command(cli, "-p", port)
	cmd.Stdin = strings.NewReader("SET k v\nGET k\n")
	out, err := cmd.CombinedOutput()
	if err != nil || string(out) != "OK\nv\n" {
		t.Errorf("redis-cli = %q, %v; want \"OK\\nv\\n\"", out, err)
	}
}

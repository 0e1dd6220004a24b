package blackboard

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/internal/redistest"
)

// moduleUser creates the ACL user of module (ModuleACL) on the package's
// server and returns a client logged in as it.
func moduleUser(t *testing.T, v env, module string) redis.UniversalClient {
	t.Helper()
	rules, err := v.k.ModuleACL(module)
	if err != nil {
		t.Fatal(err)
	}
	args := []any{"ACL", "SETUSER", module, "reset", "on", ">pw-" + module}
	for _, r := range rules {
		args = append(args, r)
	}
	srv := redistest.Shared(t)
	srv.DeleteUsers(t, module)
	if err := v.rdb.Do(context.Background(), args...).Err(); err != nil {
		t.Fatal(err)
	}
	return srv.ClientAs(t, module, "pw-"+module)
}

// postAsModule posts a compute.request the way the redis-py recipe does
// (docs/wire-format.md §3), in one MULTI, as client c.
func postAsModule(ctx context.Context, c redis.UniversalClient, k Keys, module, id string) error {
	e := mk(RequestTopic, withSource(module), withID(id))
	canon, _ := e.MarshalJSON()
	_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, k.Entry(id), "entry_id", id, "topic", RequestTopic, "source_module", module,
			"status", "active", "timestamp", "1700000000", "confidence", "1.0", "priority", "1",
			"data", "{}", "metadata", "{}", "tags", "[]", "v", "1")
		p.SAdd(ctx, k.Topics(), RequestTopic)
		for _, key := range []string{k.Topic(RequestTopic), k.Source(module), k.Prio(Normal), k.All()} {
			p.ZAdd(ctx, key, redis.Z{Score: 1700000000, Member: id})
		}
		p.HIncrBy(ctx, k.Stats(), "total_posted", 1)
		p.XAdd(ctx, &redis.XAddArgs{Stream: k.Events(), Values: []any{"event_type", EventEntryAdded}})
		p.SAdd(ctx, k.InboxLanes(), LaneMember(module, 4))
		p.XAdd(ctx, &redis.XAddArgs{Stream: k.ModuleInbox(module, 4), Values: []any{"v", "2", "entry_id", id, "entry", string(canon)}})
		return nil
	})
	return err
}

// isNoPerm: the command was refused by the ACL (inside a MULTI, the
// refusal of a queued command aborts the EXEC).
func isNoPerm(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "NOPERM") || strings.Contains(err.Error(), "EXECABORT"))
}

// A module's ACL user can post and retract its own requests and read job
// entries, and nothing that would let it act as another module or touch
// the adapter's state.
func TestModuleACL(t *testing.T) {
	v := newEnv(t, Config{})
	ctx := t.Context()
	ns := strings.TrimPrefix(v.k.Prefix(), "asi:bb:{")
	ns = strings.TrimSuffix(ns, "}")
	alice, bob := "alice-"+ns, "bob-"+ns
	a := moduleUser(t, v, alice)
	moduleUser(t, v, bob)

	mine := NewModuleID(alice)
	if err := postAsModule(ctx, a, v.k, alice, mine); err != nil {
		t.Fatalf("posting own request: %v", err)
	}
	if err := a.HSet(ctx, v.k.Entry(mine), "status", "retracted").Err(); err != nil {
		t.Errorf("retracting own request: %v", err)
	}
	jobEntry := NewID()
	v.post(t, mk("compute.job", withID(jobEntry)))
	if err := a.HGetAll(ctx, v.k.Entry(jobEntry)).Err(); err != nil {
		t.Errorf("reading a job entry: %v", err)
	}
	if _, err := a.XRead(ctx, &redis.XReadArgs{Streams: []string{v.k.Events(), "0"}, Count: 1, Block: -1}).Result(); err != nil {
		t.Errorf("watching events: %v", err)
	}

	theirs := NewModuleID(bob)
	denied := map[string]func() error{
		"post as bob (his entry and lane)": func() error { return postAsModule(ctx, a, v.k, bob, theirs) },
		"write bob's entry":                func() error { return a.HSet(ctx, v.k.Entry(theirs), "status", "retracted").Err() },
		"write a plain-id entry":           func() error { return a.HSet(ctx, v.k.Entry(NewID()), "status", "retracted").Err() },
		"write bob's lane": func() error {
			return a.XAdd(ctx, &redis.XAddArgs{Stream: v.k.ModuleInbox(bob, 4), Values: []any{"v", "2"}}).Err()
		},
		"write a legacy lane": func() error {
			return a.XAdd(ctx, &redis.XAddArgs{Stream: v.k.Inbox(4), Values: []any{"v", "1"}}).Err()
		},
		"write the dead letters": func() error {
			return a.XAdd(ctx, &redis.XAddArgs{Stream: v.k.DLQ(), Values: []any{"entry_id", mine}}).Err()
		},
		"mark a replay":      func() error { return a.SAdd(ctx, v.k.Replayed(), "1-0 x").Err() },
		"write a job record": func() error { return a.HSet(ctx, v.k.Job("j"), "status", "cancelled").Err() },
		"read a job record":  func() error { return a.HGetAll(ctx, v.k.Job("j")).Err() },
		"write the idempotency keys": func() error {
			return a.HSet(ctx, v.k.JobsIdem(), "k", "j").Err()
		},
		"write the pool's nodes":   func() error { return a.HSet(ctx, v.k.PoolNodes(), "n", "{}").Err() },
		"take the scheduler lease": func() error { return a.Set(ctx, v.k.PoolLease(), "9 me x", 0).Err() },
		"write engine state":       func() error { return a.HSet(ctx, v.k.EngineState(), "n", "{}").Err() },
		"write the job entry":      func() error { return a.HSet(ctx, v.k.Entry(jobEntry), "status", "x").Err() },
		"run a script":             func() error { return a.Eval(ctx, "return 1", nil).Err() },
		"list keys":                func() error { return a.Keys(ctx, "*").Err() },
		"delete own entry":         func() error { return a.Del(ctx, v.k.Entry(mine)).Err() },
	}
	for name, f := range denied {
		if err := f(); !isNoPerm(err) {
			t.Errorf("%s: %v, want NOPERM", name, err)
		}
	}
	if n, _ := v.rdb.Exists(ctx, v.k.Entry(theirs)).Result(); n != 0 {
		t.Error("a denied MULTI still wrote bob's entry")
	}
}

func TestModuleACLRefusesBadNames(t *testing.T) {
	for _, m := range []string{"", "a*", "a:b", "a b", strings.Repeat("x", 65)} {
		if _, err := NewKeys("b").ModuleACL(m); err == nil {
			t.Errorf("ModuleACL(%q) accepted", m)
		}
	}
}

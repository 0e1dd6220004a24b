package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/wire"
)

// aclUser creates a Redis ACL user on the package's server with rules
// (deleted when t ends) and returns a client logged in as it.
func aclUser(t *testing.T, admin redis.UniversalClient, name, password string, rules []string) redis.UniversalClient {
	t.Helper()
	sum := sha256.Sum256([]byte(password))
	args := []any{"ACL", "SETUSER", name, "reset", "on", "#" + hex.EncodeToString(sum[:])}
	for _, r := range rules {
		args = append(args, r)
	}
	srv := redistest.Shared(t)
	srv.DeleteUsers(t, name)
	if err := admin.Do(t.Context(), args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER %s: %v", name, err)
	}
	return srv.ClientAs(t, name, password)
}

// moduleUser creates the module's user by running the line `adapter acl
// MODULE --board BOARD` prints, and returns a client logged in as it with
// the password the command generated.
func moduleUser(t *testing.T, admin redis.UniversalClient, board, module string) (redis.UniversalClient, string) {
	t.Helper()
	out, code := cli(t, "acl", module, "--board", board)
	if code != 0 {
		t.Fatalf("adapter acl: exit %d\n%s", code, out)
	}
	var line, pw string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(l, "ACL SETUSER ") {
			line = l
		} else if i := strings.LastIndex(l, ": "); strings.HasPrefix(l, "generated password") && i > 0 {
			pw = l[i+2:]
		}
	}
	if line == "" || pw == "" {
		t.Fatalf("adapter acl printed no ACL line or password:\n%s", out)
	}
	var args []any
	for _, f := range strings.Fields(line) {
		args = append(args, f)
	}
	srv := redistest.Shared(t)
	srv.DeleteUsers(t, module)
	if err := admin.Do(t.Context(), args...).Err(); err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	return srv.ClientAs(t, module, pw), pw
}

// modulePost posts a compute.request the redis-py way (docs/wire-format.md
// §3, one MULTI) as client c, with the given entry id, source_module and
// lane module, and any extra intake message fields.
func modulePost(ctx context.Context, c redis.UniversalClient, k blackboard.Keys, id, source, laneModule, data string, extra ...any) error {
	e := blackboard.NewEntry(blackboard.RequestTopic, source, json.RawMessage(data))
	e.ID, e.Timestamp = id, float64(time.Now().UnixNano())/1e9
	canon, err := e.MarshalJSON()
	if err != nil {
		return err
	}
	ts := fmt.Sprint(e.Timestamp)
	lane := blackboard.RequestLane(*e)
	_, err = c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, k.Entry(id), "entry_id", id, "topic", blackboard.RequestTopic, "source_module", source,
			"status", "active", "timestamp", ts, "confidence", "1.0", "priority", "1",
			"data", data, "metadata", "{}", "tags", "[]", "v", "1")
		p.SAdd(ctx, k.Topics(), blackboard.RequestTopic)
		// The source index of the lane's module: a forger can write no other.
		for _, key := range []string{k.Topic(blackboard.RequestTopic), k.Source(laneModule), k.Prio(blackboard.Normal), k.All()} {
			p.ZAdd(ctx, key, redis.Z{Score: e.Timestamp, Member: id})
		}
		p.HIncrBy(ctx, k.Stats(), "total_posted", 1)
		p.XAdd(ctx, &redis.XAddArgs{Stream: k.Events(), Values: []any{"event_id", blackboard.NewID(),
			"event_type", blackboard.EventEntryAdded, "source", "blackboard", "timestamp", ts,
			"payload", fmt.Sprintf(`{"entry_id":%q,"topic":"compute.request","source_module":%q,"priority":"NORMAL"}`, id, source)}})
		p.SAdd(ctx, k.InboxLanes(), blackboard.LaneMember(laneModule, lane))
		p.XAdd(ctx, &redis.XAddArgs{Stream: k.ModuleInbox(laneModule, lane),
			Values: append([]any{"v", "2", "entry_id", id, "topic", blackboard.RequestTopic, "priority", "1",
				"timestamp", ts, "entry", string(canon)}, extra...)})
		return nil
	})
	return err
}

func denied(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "NOPERM") || strings.Contains(err.Error(), "EXECABORT"))
}

// TestModuleACLs runs the adapter on a board with per-module Redis ACLs
// (config identity: acl), as its own ACL user (the recipe in
// docs/security.md), and modules as the users `adapter acl` describes. A
// module cannot post as another (Redis refuses its writes, and a request
// naming another module on its own lane is refused with
// identity_mismatch), cannot cancel another's job (no write to its entry; a
// forged retraction event is only a hint), cannot touch dead letters or
// job records, and cannot skip its admission limits with replayed=1.
func TestModuleACLs(t *testing.T) {
	t.Parallel()
	srv := redistest.Shared(t)
	admin, board := redistest.New(t)
	ctx := t.Context()
	k := blackboard.NewKeys(board)
	st := storeFor(t, admin, board)

	// The adapter's own user: every key of the board, no dangerous commands.
	adapterUser := "cb-adapter-" + board
	aclUser(t, admin, adapterUser, "adapter-pw", []string{"resetchannels", "~" + k.Prefix() + ":*", "+@all", "-@dangerous"})
	u := url.URL{Scheme: "unix", User: url.UserPassword(adapterUser, "adapter-pw"), Path: srv.SocketPath()}
	cfg := writeConfig(t, strings.Replace(testConfig(board, "identity: acl\naccounts:\n  - {name: shared, modules: [carol-"+board+"]}\n"), "broker:\n",
		"broker:\n  module_rate: 0.001\n  module_burst: 2\n", 1))
	runAdapter(t, "--config", cfg, "--redis", u.String())

	alice, bob, carol := "alice-"+board, "bob-"+board, "carol-"+board
	a, alicePW := moduleUser(t, admin, board, alice)
	b, _ := moduleUser(t, admin, board, bob)
	c, _ := moduleUser(t, admin, board, carol)
	hello := `{"template":"hello"}`

	// Alice's own request runs, billed to her.
	good := blackboard.NewModuleID(alice)
	if err := modulePost(ctx, a, k, good, alice, alice, hello); err != nil {
		t.Fatalf("alice posting her own request: %v", err)
	}
	if jd := waitStatus(t, st, good, wire.JobSucceeded); jd.Account != alice {
		t.Errorf("alice's job bills %q", jd.Account)
	}

	// The redis-py example client, logged in as alice, posts the same way.
	au := url.URL{Scheme: "unix", User: url.UserPassword(alice, alicePW), Path: srv.SocketPath()}
	out, err := runPython(t, 60*time.Second, "post_request.py", "--redis", au.String(), "--board", board,
		"--module", alice, "--template", "hello")
	if err != nil {
		t.Fatalf("post_request.py as alice: %v\n%s", err, out)
	}
	if job := lastJSONLine(t, out); job["status"] != "succeeded" || !strings.HasPrefix(job["request_entry_id"].(string), alice+":") {
		t.Errorf("alice's redis-py job: %v", job)
	}

	// Posting as bob: Redis refuses bob's entry key and lane outright.
	if err := modulePost(ctx, a, k, blackboard.NewModuleID(bob), bob, bob, hello); !denied(err) {
		t.Errorf("alice posting on bob's lane and entry: %v, want NOPERM", err)
	}
	// On her own lane, with her own entry key, but source_module bob: refused.
	forged := blackboard.NewModuleID(alice)
	if err := modulePost(ctx, a, k, forged, bob, alice, hello); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the forged request's dead letter", func() bool {
		dls, _ := admin.XRange(ctx, k.DLQ(), "-", "+").Result()
		for _, m := range dls {
			if m.Values["entry_id"] == forged && m.Values["code"] == string(wire.CodeIdentityMismatch) {
				return true
			}
		}
		return false
	})
	// (Her own entry id: the refusal is on its job entry, for her to see.)
	if jd := waitStatus(t, st, forged, wire.JobRejected); jd.ReasonCode != wire.CodeIdentityMismatch {
		t.Errorf("the forged request's job: %s, want identity_mismatch", jd.ReasonCode)
	}

	// Bob's running job: alice cannot retract it, and her forged event
	// cancels nothing.
	long := blackboard.NewModuleID(bob)
	if err := modulePost(ctx, b, k, long, bob, bob, `{"template":"sleep","arguments":["30"]}`); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, st, long, wire.JobRunning)
	if err := a.HSet(ctx, k.Entry(long), "status", "retracted").Err(); !denied(err) {
		t.Errorf("alice retracting bob's request: %v, want NOPERM", err)
	}
	if err := a.XAdd(ctx, &redis.XAddArgs{Stream: k.Events(), Values: []any{"event_id", blackboard.NewID(),
		"event_type", blackboard.EventEntryUpdated, "source", "blackboard", "timestamp", "1",
		"payload", fmt.Sprintf(`{"entry_id":%q,"topic":"compute.request","field":"status","old":"active","new":"retracted"}`, long)}}).Err(); err != nil {
		t.Fatalf("alice writing an event (allowed: events are hints): %v", err)
	}
	// Bob retracts a request of his own with a plain status write after
	// the forged event: once that cancellation is seen, the forged event
	// (earlier in the stream) has been handled too.
	short := blackboard.NewModuleID(bob)
	if err := modulePost(ctx, b, k, short, bob, bob, `{"template":"sleep","arguments":["30"]}`); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, st, short, wire.JobRunning)
	if err := b.HSet(ctx, k.Entry(short), "status", "retracted").Err(); err != nil {
		t.Fatalf("bob retracting his own request: %v", err)
	}
	waitStatus(t, st, short, wire.JobCancelled)
	if jd, _ := jobData(t, st, long); jd.Status != wire.JobRunning {
		t.Errorf("bob's job is %s after alice's forged event, want running", jd.Status)
	}
	if h, err := admin.HGetAll(ctx, k.Job(wire.JobID(long))).Result(); err != nil || h["cancel_requested"] == "1" {
		t.Errorf("bob's job record %v (%v): cancel_requested after a forged event", h, err)
	}

	// No dead letters, job records, replay marks or legacy lanes.
	for name, f := range map[string]func() error{
		"write the dead letters": func() error {
			return a.XAdd(ctx, &redis.XAddArgs{Stream: k.DLQ(), Values: []any{"entry_id", good}}).Err()
		},
		"write a job record":  func() error { return a.HSet(ctx, k.Job(wire.JobID(long)), "status", "cancelled").Err() },
		"read a job record":   func() error { return a.HGetAll(ctx, k.Job(wire.JobID(long))).Err() },
		"write a replay mark": func() error { return a.SAdd(ctx, k.Replayed(), "1-0 x").Err() },
		"write a legacy lane": func() error {
			return a.XAdd(ctx, &redis.XAddArgs{Stream: k.Inbox(4), Values: []any{"v", "1"}}).Err()
		},
	} {
		if err := f(); !denied(err) {
			t.Errorf("alice: %s: %v, want NOPERM", name, err)
		}
	}

	// replayed=1 from a poster counts for nothing: carol's third request
	// in a row is over her burst of 2. She may bill "shared", not bob.
	var carols []string
	for i, extra := range [][]any{nil, nil, {"replayed", "1"}} {
		id := blackboard.NewModuleID(carol)
		data := hello
		if i == 1 {
			data = `{"template":"hello","account":"shared"}`
		}
		if err := modulePost(ctx, c, k, id, carol, carol, data, extra...); err != nil {
			t.Fatal(err)
		}
		carols = append(carols, id)
	}
	waitStatus(t, st, carols[0], wire.JobSucceeded)
	if jd := waitStatus(t, st, carols[1], wire.JobSucceeded); jd.Account != "shared" {
		t.Errorf("carol's second job bills %q, want shared", jd.Account)
	}
	if jd := waitStatus(t, st, carols[2], wire.JobRejected); jd.ReasonCode != wire.CodeRateLimited {
		t.Errorf("carol's replayed=1 request: %s %s, want rejected rate_limited", jd.Status, jd.ReasonCode)
	}
	bills := blackboard.NewModuleID(bob)
	if err := modulePost(ctx, b, k, bills, bob, bob, `{"template":"hello","account":"shared"}`); err != nil {
		t.Fatal(err)
	}
	if jd := waitStatus(t, st, bills, wire.JobRejected); jd.ReasonCode != wire.CodeAccountNotAllowed {
		t.Errorf("bob billing shared: %s, want account_not_allowed", jd.ReasonCode)
	}

	// Bob withdraws his long job with a plain status write: it is stopped.
	if err := b.HSet(ctx, k.Entry(long), "status", "retracted").Err(); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, st, long, wire.JobCancelled)
}

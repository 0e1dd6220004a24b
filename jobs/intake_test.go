package jobs

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/wire"
)

// intakeScript runs intake_job alone (the broker's script adds the ack).
var intakeScript = redis.NewScript(LuaIntake() + "\nreturn intake_job(1, 1)")

func (bd *board) intake(t *testing.T, s *Store, spec AcceptSpec) []any {
	t.Helper()
	_, keys, args, err := s.IntakeStep(nil, nil, spec, bd.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	r, err := intakeScript.Run(context.Background(), bd.rdb, keys, args...).Slice()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestIntakeStep: intake_job leaves what Accept, PublishAccepted and
// ConsumeAccepted leave (the record, the job entry, the request consumed,
// their events), and what it cannot finish it leaves untouched, saying
// why: a key that has a job, a withdrawn request, a job entry that exists,
// a stale fence.
func TestIntakeStep(t *testing.T) {
	bd := newBoard(t)
	ctx := t.Context()
	stepped := bd.post(t, "m", okData)
	bd.accept(t, bd.jobs, stepped)
	one := bd.post(t, "m", okData)
	j, _, _, err := bd.jobs.IntakeStep(nil, nil, one, bd.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	r := bd.intake(t, bd.jobs, one)
	if ir := bd.jobs.ParseIntake(r); !ir.Done || ir.Err != nil || ir.Count != 4 {
		t.Fatalf("intake_job = %v (%+v), want done, 4 entries", r, ir)
	}
	state := func(spec AcceptSpec) map[string]any {
		norm := func(s string) string {
			return strings.ReplaceAll(strings.ReplaceAll(s, spec.EntryID, "REQ"), spec.JobID, "JOB")
		}
		st := map[string]any{"request": bd.entryStatus(t, spec.EntryID)}
		for name, key := range map[string]string{"record": bd.keys.Job(spec.JobID), "job entry": bd.keys.Entry(spec.JobID)} {
			h, err := bd.rdb.HGetAll(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			n := map[string]string{}
			for k, v := range h {
				n[k] = norm(v)
			}
			st[name] = n
		}
		evs, _, err := bd.store.Events(ctx, "0", "", 1000, 0)
		if err != nil {
			t.Fatal(err)
		}
		var mine []string
		for _, ev := range evs {
			if p := string(ev.Payload); strings.Contains(p, spec.EntryID) || strings.Contains(p, spec.JobID) {
				mine = append(mine, ev.Type+" "+norm(p))
			}
		}
		st["events"] = mine
		return st
	}
	if diff := cmp.Diff(state(stepped), state(one)); diff != "" {
		t.Errorf("intake_job differs from the three steps (-steps +intake_job):\n%s", diff)
	}
	got, err := bd.jobs.Get(ctx, one.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got, j); diff != "" {
		t.Errorf("IntakeStep's job differs from the record (-record +IntakeStep):\n%s", diff)
	}

	// What it leaves to the three steps.
	dup := bd.post(t, "m", `{"command":["x"],"idempotency_key":"k"}`)
	bd.accept(t, bd.jobs, dup)
	dup2 := bd.post(t, "m", `{"command":["x"],"idempotency_key":"k"}`)
	retracted := bd.post(t, "m", okData)
	if err := bd.store.Retract(ctx, retracted.EntryID); err != nil {
		t.Fatal(err)
	}
	refused := bd.post(t, "m", okData)
	if _, err := bd.jobs.PostJobEntry(ctx, wire.JobData{JobID: refused.JobID, RequestEntryID: refused.EntryID, Status: wire.JobRejected}); err != nil {
		t.Fatal(err)
	}
	if err := bd.rdb.Set(ctx, bd.keys.PoolEpoch(), 2, 0).Err(); err != nil {
		t.Fatal(err)
	}
	fenced := bd.post(t, "m", okData)
	for name, tc := range map[string]struct {
		s    *Store
		spec AcceptSpec
		want string
	}{
		"duplicate key": {bd.jobs, dup2, "0 " + dup.JobID},
		"withdrawn":     {bd.jobs, retracted, "-1 retracted"},
		"job entry":     {bd.jobs, refused, "2 " + refused.JobID},
		"stale fence":   {bd.jobs.Fenced(Fence{Key: bd.keys.PoolEpoch(), Epoch: 1}), fenced, "-3 2"},
	} {
		posted, _ := bd.rdb.HGet(ctx, bd.keys.Stats(), "total_posted").Int()
		r := bd.intake(t, tc.s, tc.spec)
		if got := fmtReply(r); got != tc.want {
			t.Errorf("%s: intake_job = %s, want %s", name, got, tc.want)
		}
		ir := tc.s.ParseIntake(r)
		if ir.Done || (name == "stale fence") != errors.Is(ir.Err, ErrFenced) {
			t.Errorf("%s: ParseIntake = %+v", name, ir)
		}
		if ok, _ := bd.jobs.Exists(ctx, tc.spec.JobID); ok {
			t.Errorf("%s: a record was made", name)
		}
		if n, _ := bd.rdb.HGet(ctx, bd.keys.Stats(), "total_posted").Int(); n != posted {
			t.Errorf("%s: an entry was posted", name)
		}
		if st := bd.entryStatus(t, tc.spec.EntryID); st == blackboard.StatusConsumed {
			t.Errorf("%s: the request was consumed", name)
		}
	}
	// A current fence lets it through.
	if r := bd.intake(t, bd.jobs.Fenced(Fence{Key: bd.keys.PoolEpoch(), Epoch: 2}), fenced); !bd.jobs.ParseIntake(r).Done {
		t.Errorf("through the current epoch: %v", r)
	}
}

func fmtReply(r []any) string {
	var parts []string
	for _, x := range r {
		switch x := x.(type) {
		case int64:
			parts = append(parts, formatFloat(float64(x)))
		case string:
			parts = append(parts, x)
		}
	}
	return strings.Join(parts, " ")
}

// TestRecordRequestInHash: a record written before its long fields had
// keys of their own keeps them in its HASH (request_data, explanation),
// and still reads so through Get, GetMany and a transition; a newer, long
// explanation goes beside it and takes its place, and a short one after
// that is in the HASH again.
func TestRecordRequestInHash(t *testing.T) {
	bd := newBoard(t)
	ctx := t.Context()
	data := `{"command":["x"],"priority":9,"account":"m","idempotency_key":"old","resource_requirements":{"cpu_cores":2,"memory":1}}`
	spec := bd.post(t, "m", data)
	spec.RequestData = []byte(data)
	bd.accept(t, bd.jobs, spec)
	// The layout before: the request in the HASH, no key beside it.
	req := bd.keys.JobField(spec.JobID, "request_data")
	if err := bd.rdb.HSet(ctx, bd.keys.Job(spec.JobID), "request_data", bd.rdb.Get(ctx, req).Val()).Err(); err != nil {
		t.Fatal(err)
	}
	if n := bd.rdb.Del(ctx, req).Val(); n != 1 {
		t.Fatalf("the request key was not there to move: %d", n)
	}
	j, err := bd.jobs.Get(ctx, spec.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(spec.Request, j.Request); diff != "" {
		t.Errorf("Get (-accepted +read):\n%s", diff)
	}
	js, err := bd.jobs.GetMany(ctx, []string{spec.JobID})
	if err != nil || len(js) != 1 {
		t.Fatalf("GetMany: %v %v", js, err)
	}
	if diff := cmp.Diff(spec.Request, js[0].Request); diff != "" {
		t.Errorf("GetMany (-accepted +read):\n%s", diff)
	}
	// An explanation it kept in its HASH gives way to a newer, long one,
	// which goes beside it; a short one after that is in the HASH again,
	// and wins over the stale one beside it.
	if err := bd.rdb.HSet(ctx, bd.keys.Job(spec.JobID), "explanation", `{"reason":"old"}`).Err(); err != nil {
		t.Fatal(err)
	}
	if j, err = bd.jobs.Get(ctx, spec.JobID); err != nil || string(j.Explanation) != `{"reason":"old"}` {
		t.Errorf("Get's explanation kept in the HASH: %s (%v)", j.Explanation, err)
	}
	long := `{"position":60,"priority":6,"level":4,"reason":"no-fit","message":"0/1 nodes: 1 cpu"}`
	for _, expl := range []string{long, `{"reason":"short"}`} {
		if _, err := bd.jobs.Transition(ctx, spec.JobID, wire.JobQueued, wire.JobQueued, Update{Explanation: []byte(expl)}); err != nil {
			t.Fatal(err)
		}
		if j, err = bd.jobs.Get(ctx, spec.JobID); err != nil || string(j.Explanation) != expl {
			t.Errorf("Get's explanation %s (%v), want %s", j.Explanation, err, expl)
		}
		if j, err = bd.jobs.Transition(ctx, spec.JobID, wire.JobQueued, wire.JobQueued, Update{}); err != nil || string(j.Explanation) != expl {
			t.Errorf("Transition's explanation %s (%v), want %s", j.Explanation, err, expl)
		}
	}
	if bd.rdb.Exists(ctx, bd.keys.JobField(spec.JobID, "explanation")).Val() != 1 {
		t.Error("the long explanation was not kept beside the record")
	}
	j, err = bd.jobs.Transition(ctx, spec.JobID, wire.JobQueued, wire.JobRunning, Update{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(spec.Request, j.Request); diff != "" {
		t.Errorf("Transition (-accepted +read):\n%s", diff)
	}
}

// TestRecordRequestData: a record made from a spec with RequestData keeps
// the request as posted (not the request re-encoded with its defaults),
// when longer than 64 bytes in its own key beside the record's HASH, and
// so is a long explanation, so that the HASH of a waiting job has only
// short fields and Redis keeps it as a listpack; it reads back the same
// Request, defaults included, by Accept's step and by intake_job alike,
// through Get and through a transition.
func TestRecordRequestData(t *testing.T) {
	bd := newBoard(t)
	ctx := t.Context()
	for name, data := range map[string]string{
		"defaults": okData,
		"explicit": `{"command":["x"],"priority":9,"account":"m","idempotency_key":"k","resource_requirements":{"cpu_cores":2,"memory":1}}`,
	} {
		for _, via := range []string{"accept", "intake"} {
			spec := bd.post(t, "m", data)
			spec.RequestData = []byte(data)
			if name == "explicit" {
				spec.Request.IdempotencyKey += via // one job per key
				spec.RequestData = []byte(strings.Replace(data, `"k"`, `"k`+via+`"`, 1))
			}
			if via == "accept" {
				bd.accept(t, bd.jobs, spec)
			} else if r := bd.intake(t, bd.jobs, spec); !bd.jobs.ParseIntake(r).Done {
				t.Fatalf("%s via %s: intake_job = %v", name, via, r)
			}
			h, err := bd.rdb.HGetAll(ctx, bd.keys.Job(spec.JobID)).Result()
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := h["request"]; ok {
				t.Errorf("%s via %s: record has request %q", name, via, h["request"])
			}
			// Beside the HASH when longer than Redis's default
			// hash-max-listpack-value (64), else in it.
			inHash, beside := h["request_data"], bd.rdb.Get(ctx, bd.keys.JobField(spec.JobID, "request_data")).Val()
			if long := len(spec.RequestData) > 64; long && (inHash != "" || beside != string(spec.RequestData)) ||
				!long && (inHash != string(spec.RequestData) || beside != "") {
				t.Errorf("%s via %s: %d bytes of request, %q in the HASH and %q beside it", name, via, len(spec.RequestData), inHash, beside)
			}
			// The longest field left is a float's or an id's: under 64.
			if enc := bd.rdb.ObjectEncoding(ctx, bd.keys.Job(spec.JobID)).Val(); enc != "listpack" {
				t.Errorf("%s via %s: the record of a waiting job is a %s, want a listpack", name, via, enc)
			}
			j, err := bd.jobs.Get(ctx, spec.JobID)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(spec.Request, j.Request); diff != "" {
				t.Errorf("%s via %s: request read back (-accepted +read):\n%s", name, via, diff)
			}
			// An explanation, as the scheduler publishes one for a job that
			// waits, is as long as the request: beside the HASH too.
			expl := `{"position":60,"priority":6,"level":4,"reason":"no-fit","message":"0/1 nodes: 1 cpu","placed":false}`
			if _, err := bd.jobs.Transition(ctx, spec.JobID, wire.JobQueued, wire.JobQueued, Update{Explanation: []byte(expl)}); err != nil {
				t.Fatal(err)
			}
			if bd.rdb.HExists(ctx, bd.keys.Job(spec.JobID), "explanation").Val() {
				t.Errorf("%s via %s: record's HASH holds the explanation", name, via)
			}
			if enc := bd.rdb.ObjectEncoding(ctx, bd.keys.Job(spec.JobID)).Val(); enc != "listpack" {
				t.Errorf("%s via %s: the record of an explained waiting job is a %s, want a listpack", name, via, enc)
			}
			j, err = bd.jobs.Transition(ctx, spec.JobID, wire.JobQueued, wire.JobRunning, Update{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(spec.Request, j.Request); diff != "" {
				t.Errorf("%s via %s: request of the transition's record (-accepted +read):\n%s", name, via, diff)
			}
			if string(j.Explanation) != expl {
				t.Errorf("%s via %s: explanation of the transition's record %s, want %s", name, via, j.Explanation, expl)
			}
			if j, err = bd.jobs.Get(ctx, spec.JobID); err != nil || string(j.Explanation) != expl {
				t.Errorf("%s via %s: Get's explanation %s (%v), want %s", name, via, j.Explanation, err, expl)
			}
		}
	}
}

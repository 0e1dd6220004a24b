package blackboard

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// indexedIn returns the index keys of the board that still hold id, for an
// entry of topic t and source m (as mk builds).
func (v env) indexedIn(t testing.TB, id string) []string {
	t.Helper()
	keys := append([]string{v.k.Topic("t"), v.k.Source("m"), v.k.All(), v.k.Expiry(), v.k.Retire()}, v.k.prios()...)
	out := []string{}
	for _, k := range keys {
		if _, err := v.rdb.ZScore(context.Background(), k, id).Result(); err == nil {
			out = append(out, k)
		}
	}
	return out
}

// retireScore returns id's P:retire score, or -1 when it is not there.
func (v env) retireScore(t testing.TB, id string) float64 {
	t.Helper()
	s, err := v.rdb.ZScore(context.Background(), v.k.Retire(), id).Result()
	if err != nil {
		return -1
	}
	return s
}

func (v env) sweep(t testing.TB) SweepResult {
	t.Helper()
	res, err := v.s.Sweep(context.Background(), v.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestSweepQuiet: only a sweep that expired, retired or evicted something
// emits blackboard.sweep.complete (and counts active entries).
func TestSweepQuiet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := map[string]struct {
		cfg         Config
		setup       func(t *testing.T, v env)
		want        SweepResult
		wantPayload string // "" = no sweep.complete event
	}{
		"empty board": {want: SweepResult{Active: -1}},
		"no ttl": {
			setup: func(t *testing.T, v env) { v.post(t, mk("t")) },
			want:  SweepResult{Active: -1},
		},
		"ttl not lapsed": {
			setup: func(t *testing.T, v env) { v.post(t, mk("t", withTTL(100))); v.clk.Advance(100 * time.Second) },
			want:  SweepResult{Active: -1},
		},
		"already swept": {
			setup: func(t *testing.T, v env) {
				v.post(t, mk("t", withTTL(1)))
				v.clk.Advance(2 * time.Second)
				v.sweep(t)
				v.clk.Advance(time.Second)
			},
			want: SweepResult{Active: -1},
		},
		"index member not due for retirement": {
			cfg: Config{Retention: time.Minute},
			setup: func(t *testing.T, v env) {
				v.post(t, mk("t", withStatus(StatusExpired)))
				v.clk.Advance(time.Minute)
			},
			want: SweepResult{Active: -1},
		},
		"expired": {
			setup: func(t *testing.T, v env) {
				v.post(t, mk("t", withTTL(1)))
				v.post(t, mk("t"))
				v.clk.Advance(2 * time.Second)
			},
			want:        SweepResult{Expired: 1, Active: 1},
			wantPayload: `{"expired_count":1,"active_count":1}`,
		},
		"evicted": {
			cfg: Config{MaxEntries: 1},
			setup: func(t *testing.T, v env) {
				// Posted together, none is evicted by the post itself.
				if _, err := v.s.PostMany(ctx, []*Entry{mk("t"), mk("t"), mk("t")}); err != nil {
					t.Fatal(err)
				}
			},
			want:        SweepResult{Evicted: 2, Active: 1},
			wantPayload: `{"expired_count":0,"active_count":1}`,
		},
		"retired": {
			cfg: Config{Retention: 10 * time.Second},
			setup: func(t *testing.T, v env) {
				v.post(t, mk("t", withTTL(1)))
				v.post(t, mk("t", withStatus(StatusConsumed)))
				v.clk.Advance(2 * time.Second)
				v.sweep(t)
				v.clk.Advance(11 * time.Second)
			},
			want:        SweepResult{Retired: 1, Active: 0},
			wantPayload: `{"expired_count":0,"active_count":0}`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			v := newEnv(t, tc.cfg)
			if tc.setup != nil {
				tc.setup(t, v)
			}
			before := len(v.events(t, EventSweepComplete))
			res := v.sweep(t)
			if diff := cmp.Diff(tc.want, res); diff != "" {
				t.Errorf("Sweep (-want +got):\n%s", diff)
			}
			if res.Changed() != (tc.wantPayload != "") {
				t.Errorf("Changed() = %v", res.Changed())
			}
			got := v.events(t, EventSweepComplete)[before:]
			want := []ev{}
			if tc.wantPayload != "" {
				want = append(want, ev{EventSweepComplete, "blackboard", tc.wantPayload})
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("sweep.complete events (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRetention: however an entry becomes expired, it enters P:retire at
// expired_at + Retention and the sweeper removes it, from every index, once
// it has been expired for longer than that.
func TestRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const retention = 30 * time.Second
	tests := map[string]func(t *testing.T, v env) string{ // returns the id, expired at v.clk.Now()
		"sweep": func(t *testing.T, v env) string {
			id := v.post(t, mk("t", withTTL(1)))
			v.clk.Advance(2 * time.Second)
			if res := v.sweep(t); res.Expired != 1 {
				t.Fatalf("Sweep = %+v", res)
			}
			return id
		},
		"Expire": func(t *testing.T, v env) string {
			id := v.post(t, mk("t", withTTL(100)))
			v.clk.Advance(time.Second)
			if err := v.s.Expire(ctx, id, nil); err != nil {
				t.Fatal(err)
			}
			return id
		},
		"lazy expiry on Get": func(t *testing.T, v env) string {
			id := v.post(t, mk("t", withTTL(1)))
			v.clk.Advance(2 * time.Second)
			if _, err := v.s.Get(ctx, id); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get = %v, want ErrNotFound", err)
			}
			return id
		},
		"Update status": func(t *testing.T, v env) string {
			id := v.post(t, mk("t"))
			v.clk.Advance(time.Second)
			st := StatusExpired
			if err := v.s.Update(ctx, id, Update{Status: &st}); err != nil {
				t.Fatal(err)
			}
			return id
		},
		"posted expired": func(t *testing.T, v env) string {
			return v.post(t, mk("t", withStatus(StatusExpired), withPrio(Critical)))
		},
		"PostMany expired": func(t *testing.T, v env) string {
			ids, err := v.s.PostMany(ctx, []*Entry{mk("t"), mk("t", withStatus(StatusExpired), withPrio(Low))})
			if err != nil {
				t.Fatal(err)
			}
			return ids[1]
		},
		"Supersede with expired": func(t *testing.T, v env) string {
			old := v.post(t, mk("t"))
			id, err := v.s.Supersede(ctx, old, mk("t", withStatus(StatusExpired), withPrio(High)))
			if err != nil {
				t.Fatal(err)
			}
			return id
		},
	}
	for name, expire := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			v := newEnv(t, Config{Retention: retention})
			id := expire(t, v)
			expiredAt := epoch(v.clk.Now())
			if got := v.retireScore(t, id); got != expiredAt+retention.Seconds() {
				t.Errorf("P:retire score %v, want expired_at + 30 = %v", got, expiredAt+retention.Seconds())
			}

			v.clk.Advance(retention) // expired for exactly Retention: kept
			if res := v.sweep(t); res.Retired != 0 {
				t.Errorf("Sweep at expired_at + Retention = %+v, want nothing retired", res)
			}
			if v.hash(t, id)["status"] != "expired" {
				t.Fatalf("entry gone too early")
			}

			v.clk.Advance(time.Millisecond)
			res := v.sweep(t)
			if res.Retired != 1 || !res.Changed() {
				t.Errorf("Sweep = %+v, want 1 retired", res)
			}
			if h := v.hash(t, id); len(h) != 0 {
				t.Errorf("entry still there: %v", h)
			}
			if got := v.indexedIn(t, id); len(got) != 0 {
				t.Errorf("still indexed in %v", got)
			}
			want := []ev{{EventEntryRemoved, "blackboard", `{"entry_id":"` + id + `","topic":"t","reason":"retention"}`}}
			if diff := cmp.Diff(want, v.events(t, EventEntryRemoved)); diff != "" {
				t.Errorf("removed events (-want +got):\n%s", diff)
			}
			stats, err := v.s.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if stats.TotalRetired != 1 || stats.TotalRemoved != 1 || stats.TotalEvicted != 0 {
				t.Errorf("stats = %+v, want 1 retired and removed", stats)
			}
		})
	}
}

// TestRetentionRecheck: retire.lua re-checks each due member, so an entry
// that left status expired, expired again, or is gone is not removed (or
// counted) by its stale P:retire member.
func TestRetentionRecheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	setStatus := func(t *testing.T, v env, id string, st Status) {
		t.Helper()
		if err := v.s.Update(ctx, id, Update{Status: &st}); err != nil {
			t.Fatal(err)
		}
	}
	expire := func(t *testing.T, v env, id string) {
		t.Helper()
		if err := v.s.Expire(ctx, id, nil); err != nil {
			t.Fatal(err)
		}
	}
	tests := map[string]struct {
		cfg Config
		// change runs at t0 on a fresh entry and returns how long after t0
		// the sweep runs.
		change     func(t *testing.T, v env, id string) time.Duration
		wantStatus string // "" = gone
		wantRetire bool   // still in P:retire after the sweep
		want       SweepResult
	}{
		"reactivated": {
			change: func(t *testing.T, v env, id string) time.Duration {
				expire(t, v, id)
				setStatus(t, v, id, StatusActive)
				return 2 * time.Hour
			},
			wantStatus: "active", want: SweepResult{Active: -1},
		},
		"retracted": {
			change: func(t *testing.T, v env, id string) time.Duration {
				expire(t, v, id)
				if err := v.s.Retract(ctx, id); err != nil {
					t.Fatal(err)
				}
				return 2 * time.Hour
			},
			wantStatus: "retracted", want: SweepResult{Active: -1},
		},
		"expired again later": {
			cfg: Config{Retention: 30 * time.Second},
			change: func(t *testing.T, v env, id string) time.Duration {
				expire(t, v, id)
				v.clk.Advance(10 * time.Second)
				setStatus(t, v, id, StatusActive)
				v.clk.Advance(10 * time.Second)
				expire(t, v, id) // due at t0 + 50s now
				return 31 * time.Second
			},
			wantStatus: "expired", wantRetire: true, want: SweepResult{Active: -1},
		},
		"removed": {
			change: func(t *testing.T, v env, id string) time.Duration {
				expire(t, v, id)
				if err := v.s.Remove(ctx, id, ""); err != nil {
					t.Fatal(err)
				}
				if s := v.retireScore(t, id); s != -1 {
					t.Errorf("Remove left P:retire member scored %v", s)
				}
				return 2 * time.Hour
			},
			want: SweepResult{Active: -1},
		},
		"deleted by a writer that does not know P:retire": {
			change: func(t *testing.T, v env, id string) time.Duration {
				expire(t, v, id)
				// As remove.lua did before P:retire: the entry and its
				// topic and source members go (retire.lua cannot name
				// those without the entry); the rest is left behind.
				pipe := v.rdb.TxPipeline()
				pipe.Del(ctx, v.k.Entry(id))
				pipe.ZRem(ctx, v.k.Topic("t"), id)
				pipe.ZRem(ctx, v.k.Source("m"), id)
				if _, err := pipe.Exec(ctx); err != nil {
					t.Fatal(err)
				}
				return 2 * time.Hour
			},
			want: SweepResult{Active: -1},
		},
		"keep forever": {
			cfg: Config{Retention: -1},
			change: func(t *testing.T, v env, id string) time.Duration {
				expire(t, v, id)
				return 1000 * time.Hour
			},
			wantStatus: "expired", want: SweepResult{Active: -1},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			v := newEnv(t, tc.cfg)
			id := v.post(t, mk("t"))
			v.clk.Set(t0.Add(tc.change(t, v, id)))
			res := v.sweep(t)
			if diff := cmp.Diff(tc.want, res); diff != "" {
				t.Errorf("Sweep (-want +got):\n%s", diff)
			}
			if got := v.hash(t, id)["status"]; got != tc.wantStatus {
				t.Errorf("status %q, want %q", got, tc.wantStatus)
			}
			if got := v.retireScore(t, id) != -1; got != tc.wantRetire {
				t.Errorf("in P:retire = %v, want %v", got, tc.wantRetire)
			}
			if tc.wantStatus == "" {
				if got := v.indexedIn(t, id); len(got) != 0 {
					t.Errorf("gone entry still indexed in %v", got)
				}
			}
			removed := 0
			for _, e := range v.events(t, EventEntryRemoved) {
				if e.Payload == `{"entry_id":"`+id+`","topic":"t","reason":"retention"}` {
					removed++
				}
			}
			if total, _ := v.rdb.HGet(ctx, v.k.Stats(), "total_retired").Result(); removed != 0 || total != "" {
				t.Errorf("%d retention events, total_retired %q; want none", removed, total)
			}
		})
	}
}

// TestRetireBatches: more due entries than one retire.lua call takes are
// all removed by one Sweep.
func TestRetireBatches(t *testing.T) {
	t.Parallel()
	v := newEnv(t, Config{Retention: time.Second})
	es := make([]*Entry, 2*sweepBatch+7)
	for i := range es {
		es[i] = mk("t", withStatus(StatusExpired))
	}
	if _, err := v.s.PostMany(context.Background(), es); err != nil {
		t.Fatal(err)
	}
	v.clk.Advance(2 * time.Second)
	if res := v.sweep(t); res.Retired != len(es) || res.Active != 0 {
		t.Errorf("Sweep = %+v, want %d retired", res, len(es))
	}
	for _, k := range []string{v.k.All(), v.k.Retire(), v.k.Topic("t")} {
		if n, _ := v.rdb.ZCard(context.Background(), k).Result(); n != 0 {
			t.Errorf("%s has %d members, want 0", k, n)
		}
	}
}

// TestRetireConcurrent: sweepers racing over the same due entries remove
// each once, with one event each.
func TestRetireConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n, sweepers = 300, 4
	v := newEnv(t, Config{Retention: time.Second})
	es := make([]*Entry, n)
	for i := range es {
		es[i] = mk("t", withStatus(StatusExpired))
	}
	if _, err := v.s.PostMany(ctx, es); err != nil {
		t.Fatal(err)
	}
	v.clk.Advance(2 * time.Second)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		retired int
	)
	for range sweepers {
		wg.Go(func() {
			res, err := v.s.Sweep(ctx, v.clk.Now())
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			retired += res.Retired
			mu.Unlock()
		})
	}
	wg.Wait()
	if retired != n {
		t.Errorf("sweepers retired %d, want %d", retired, n)
	}
	if got := len(v.events(t, EventEntryRemoved)); got != n {
		t.Errorf("%d removed events, want %d", got, n)
	}
	if total, _ := v.rdb.HGet(ctx, v.k.Stats(), "total_retired").Result(); total != strconv.Itoa(n) {
		t.Errorf("total_retired = %q, want %d", total, n)
	}
	keys := append([]string{v.k.All(), v.k.Retire(), v.k.Topic("t"), v.k.Source("m")}, v.k.prios()...)
	for _, k := range keys {
		if n, _ := v.rdb.ZCard(ctx, k).Result(); n != 0 {
			t.Errorf("%s has %d members, want 0", k, n)
		}
	}
}

// TestRetentionKeepsCapacity is the long-running board: the compute adapter
// posts three telemetry entries every 10 s (TTL 60-180 s) next to a job
// entry modules wait on. Kept forever, expired telemetry fills the board and
// eviction reaches the job entry; with Retention it never does.
func TestRetentionKeepsCapacity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := map[string]struct {
		retention   time.Duration
		wantJobKept bool
	}{
		"retention":    {retention: time.Minute, wantJobKept: true},
		"keep forever": {retention: -1, wantJobKept: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const capacity = 100
			v := newEnv(t, Config{MaxEntries: capacity, Retention: tc.retention})
			job := v.post(t, mk("compute.job"))
			maxCount := int64(0)
			for tick := range 30 * 60 / 5 { // 30 min, a sweep every 5 s
				if tick%2 == 0 {
					_, err := v.s.PostMany(ctx, []*Entry{
						mk("compute.resource_utilization", withTTL(60)),
						mk("compute.job_status", withTTL(120)),
						mk("compute.metrics", withTTL(180), withPrio(Low)),
					})
					if err != nil {
						t.Fatal(err)
					}
				}
				v.clk.Advance(5 * time.Second)
				v.sweep(t)
				n, _ := v.rdb.ZCard(ctx, v.k.All()).Result()
				maxCount = max(maxCount, n)
			}
			_, err := v.s.Get(ctx, job)
			if kept := err == nil; kept != tc.wantJobKept {
				t.Errorf("job entry kept = %v (%v), want %v; at most %d entries", kept, err, tc.wantJobKept, maxCount)
			}
			if tc.wantJobKept && maxCount >= capacity {
				t.Errorf("board reached %d entries, want it to stay under %d", maxCount, capacity)
			}
		})
	}
}

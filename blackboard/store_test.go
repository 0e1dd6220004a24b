package blackboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/internal/redistest"
)

func TestNewConfig(t *testing.T) {
	rdb, _ := redistest.New(t)
	tests := map[string]struct {
		cfg     Config
		wantErr bool
		check   func(*Store) string
	}{
		"defaults": {cfg: Config{}, check: func(s *Store) string {
			return fmt.Sprintf("%s %d %d %v %v", s.keys.Prefix(), s.maxEntries, s.eventsMaxLen, s.sweepInterval, s.retention)
		}},
		"unlimited":       {cfg: Config{MaxEntries: -1}, check: func(s *Store) string { return fmt.Sprint(s.maxEntries) }},
		"retention":       {cfg: Config{Retention: 90 * time.Second}, check: func(s *Store) string { return s.retentionArg() }},
		"keep forever":    {cfg: Config{Retention: -time.Nanosecond}, check: func(s *Store) string { return s.retentionArg() }},
		"brace namespace": {cfg: Config{Namespace: "a}b"}, wantErr: true},
		"bad max":         {cfg: Config{MaxEntries: -2}, wantErr: true},
		"bad maxlen":      {cfg: Config{EventsMaxLen: -1}, wantErr: true},
	}
	want := map[string]string{"defaults": "asi:bb:{default} 10000 10000 1s 1h0m0s", "unlimited": "-1",
		"retention": "90", "keep forever": "-1"}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s, err := New(rdb, tc.cfg)
			if (err != nil) != tc.wantErr {
				t.Fatalf("New = %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				if !errors.Is(err, ErrInvalid) {
					t.Errorf("New = %v, want ErrInvalid", err)
				}
				return
			}
			if got := tc.check(s); got != want[name] {
				t.Errorf("got %q, want %q", got, want[name])
			}
		})
	}
	if _, err := New(nil, Config{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("New(nil) = %v, want ErrInvalid", err)
	}
}

func TestPost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newEnv(t, Config{})
	e := mk("reasoning.inference", withPrio(High), withTTL(30), withTags("b", "a", "b"),
		withData(`{"claim": "x"}`), withMeta(map[string]any{"k": 1.0}), withConf(0.75))
	e.ParentID = hexID(9)
	id, err := v.s.Post(ctx, e)
	if err != nil {
		t.Fatal(err)
	}
	if id != e.ID || !ValidID(id) || e.Timestamp != ts0 || e.Status != StatusActive {
		t.Errorf("Post did not fill the entry: id %q, %+v", id, *e)
	}
	if diff := cmp.Diff([]string{"a", "b"}, e.Tags); diff != "" {
		t.Errorf("tags not normalized (-want +got):\n%s", diff)
	}
	if string(e.Data) != `{"claim":"x"}` {
		t.Errorf("data not compacted: %s", e.Data)
	}

	wantHash := map[string]string{
		"entry_id": id, "topic": "reasoning.inference", "source_module": "m", "status": "active",
		"timestamp": "1700000000", "confidence": "0.75", "priority": "2", "data": `{"claim":"x"}`,
		"metadata": `{"k":1}`, "tags": `["a","b"]`, "ttl_seconds": "30", "parent_id": hexID(9), "v": "1",
	}
	if diff := cmp.Diff(wantHash, v.hash(t, id)); diff != "" {
		t.Errorf("entry hash (-want +got):\n%s", diff)
	}
	for _, key := range []string{v.k.Topic("reasoning.inference"), v.k.Source("m"), v.k.Prio(High), v.k.All(), v.k.Expiry()} {
		if diff := cmp.Diff([]string{id}, v.zmembers(t, key)); diff != "" {
			t.Errorf("index %s (-want +got):\n%s", key, diff)
		}
	}
	if got, _ := v.rdb.ZScore(ctx, v.k.Expiry(), id).Result(); got != ts0+30 {
		t.Errorf("expiry score = %v, want %v", got, ts0+30)
	}
	if ok, _ := v.rdb.SIsMember(ctx, v.k.Topics(), "reasoning.inference").Result(); !ok {
		t.Error("topic not in P:topics")
	}
	if got, _ := v.rdb.HGet(ctx, v.k.Stats(), "total_posted").Result(); got != "1" {
		t.Errorf("total_posted = %q, want 1", got)
	}
	wantEvents := []ev{{EventEntryAdded, "blackboard",
		`{"entry_id":"` + id + `","topic":"reasoning.inference","source_module":"m","priority":"HIGH"}`}}
	if diff := cmp.Diff(wantEvents, v.events(t, "*")); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	// A non-request topic touches no intake lane.
	for lane := range NumLanes {
		for _, key := range []string{v.k.Inbox(lane), v.k.ModuleInbox("m", lane)} {
			if n, _ := v.rdb.XLen(ctx, key).Result(); n != 0 {
				t.Errorf("lane %s has %d messages", key, n)
			}
		}
	}
	if n, _ := v.rdb.SCard(ctx, v.k.InboxLanes()).Result(); n != 0 {
		t.Errorf("lane registry holds %d lanes", n)
	}
	got, err := v.s.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(*e, got); diff != "" {
		t.Errorf("Get after Post (-want +got):\n%s", diff)
	}
}

func TestPostErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newEnv(t, Config{})
	v.post(t, mk("t", withID(hexID(1))))
	tests := map[string]struct {
		e    *Entry
		want error
	}{
		"duplicate id":   {mk("t", withID(hexID(1))), ErrConflict},
		"empty topic":    {mk(""), ErrInvalid},
		"bad id":         {mk("t", withID("xyz")), ErrInvalid},
		"confidence NaN": {mk("t", withConf(nan())), ErrInvalid},
		"confidence 2":   {mk("t", withConf(2)), ErrInvalid},
		"bad data":       {mk("t", withData("{")), ErrInvalid},
		"nil":            {nil, ErrInvalid},
		"metadata NaN":   {mk("t", withMeta(map[string]any{"x": nan()})), ErrInvalid},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := v.s.Post(ctx, tc.e)
			if !errors.Is(err, tc.want) {
				t.Errorf("Post = %v, want %v", err, tc.want)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "blackboard: post ") {
				t.Errorf("error %q is not wrapped as blackboard: post <id>: ...", err)
			}
		})
	}
	if n, _ := v.rdb.ZCard(ctx, v.k.All()).Result(); n != 1 {
		t.Errorf("%d entries after failed posts, want 1", n)
	}
	if diff := cmp.Diff(1, len(v.events(t, "*"))); diff != "" {
		t.Errorf("events after failed posts (-want +got):\n%s", diff)
	}
}

func TestPostIfAbsent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newEnv(t, Config{})
	first := mk("compute.job", withID(hexID(7)), withData(`{"status":"queued"}`))
	created, err := v.s.PostIfAbsent(ctx, first)
	if err != nil || !created {
		t.Fatalf("first PostIfAbsent = %v, %v; want true, nil", created, err)
	}
	v.clk.Advance(time.Second)
	second := mk("compute.job", withID(hexID(7)), withData(`{"status":"running"}`))
	created, err = v.s.PostIfAbsent(ctx, second)
	if err != nil || created {
		t.Fatalf("second PostIfAbsent = %v, %v; want false, nil", created, err)
	}
	got, err := v.s.Get(ctx, hexID(7))
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Data) != `{"status":"queued"}` {
		t.Errorf("data = %s, want the first post's", got.Data)
	}
	if n := len(v.events(t, EventEntryAdded)); n != 1 {
		t.Errorf("%d added events, want 1", n)
	}
}

func TestPostMany(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := map[string]struct {
		entries   []*Entry
		wantErr   error
		wantCount int64
	}{
		"all new": {
			entries:   []*Entry{mk("a", withID(hexID(1))), mk("b", withID(hexID(2))), mk(RequestTopic, withID(hexID(3)))},
			wantCount: 4,
		},
		"one taken writes nothing": {
			entries: []*Entry{mk("a", withID(hexID(1))), mk("b", withID(hexID(100)))},
			wantErr: ErrConflict, wantCount: 1,
		},
		"repeated in batch": {
			entries: []*Entry{mk("a", withID(hexID(1))), mk("b", withID(hexID(1)))},
			wantErr: ErrConflict, wantCount: 1,
		},
		"one invalid writes nothing": {
			entries: []*Entry{mk("a", withID(hexID(1))), mk("")},
			wantErr: ErrInvalid, wantCount: 1,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			v := newEnv(t, Config{})
			v.post(t, mk("x", withID(hexID(100))))
			got, err := v.s.PostMany(ctx, tc.entries)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("PostMany = %v, want %v", err, tc.wantErr)
			}
			if n, _ := v.rdb.ZCard(ctx, v.k.All()).Result(); n != tc.wantCount {
				t.Errorf("%d entries, want %d", n, tc.wantCount)
			}
			added := v.events(t, EventEntryAdded)
			if int64(len(added)) != tc.wantCount {
				t.Errorf("%d added events, want %d", len(added), tc.wantCount)
			}
			if err != nil {
				if n, _ := v.rdb.XLen(ctx, v.k.ModuleInbox("m", 4)).Result(); n != 0 {
					t.Errorf("failed batch left %d intake messages", n)
				}
				return
			}
			if diff := cmp.Diff([]string{hexID(1), hexID(2), hexID(3)}, got); diff != "" {
				t.Errorf("ids (-want +got):\n%s", diff)
			}
			// Events in batch order, each with priority (the original's post_many dropped it).
			for i, a := range added[1:] {
				if want := `"priority":"NORMAL"`; !strings.Contains(a.Payload, want) || !strings.Contains(a.Payload, hexID(i+1)) {
					t.Errorf("added event %d = %s", i, a.Payload)
				}
			}
			if n, _ := v.rdb.XLen(ctx, v.k.ModuleInbox("m", 4)).Result(); n != 1 {
				t.Errorf("lane 4 has %d messages, want 1", n)
			}
		})
	}
}

func TestPostComputeRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := map[string]struct {
		data     string
		prio     Priority
		wantLane int
	}{
		"explicit lane 9":   {`{"command":["echo"],"priority":9}`, Low, 9},
		"explicit lane 0":   {`{"priority":0}`, Critical, 0},
		"default LOW":       {`{"command":["echo"]}`, Low, 2},
		"default NORMAL":    {`{}`, Normal, 4},
		"default HIGH":      {`{}`, High, 6},
		"default CRITICAL":  {`{}`, Critical, 8},
		"out of range":      {`{"priority":12}`, High, 6},
		"non-integer value": {`{"priority":"high"}`, Normal, 4},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			v := newEnv(t, Config{})
			e := mk(RequestTopic, withPrio(tc.prio), withData(tc.data), withTTL(5))
			id := v.post(t, e)
			for lane := range NumLanes {
				if n, _ := v.rdb.XLen(ctx, v.k.Inbox(lane)).Result(); n != 0 {
					t.Errorf("legacy lane %d has %d messages", lane, n)
				}
				msgs, err := v.rdb.XRange(ctx, v.k.ModuleInbox("m", lane), "-", "+").Result()
				if err != nil {
					t.Fatal(err)
				}
				if lane != tc.wantLane {
					if len(msgs) != 0 {
						t.Errorf("lane %d has %d messages, want 0", lane, len(msgs))
					}
					continue
				}
				if len(msgs) != 1 {
					t.Fatalf("lane %d has %d messages, want 1", lane, len(msgs))
				}
				canon, _ := e.MarshalJSON()
				if ok, _ := v.rdb.SIsMember(ctx, v.k.InboxLanes(), LaneMember("m", lane)).Result(); !ok {
					t.Errorf("lane %d not registered", lane)
				}
				want := map[string]any{"v": "2", "entry_id": id, "topic": RequestTopic,
					"priority": fmt.Sprint(int(tc.prio)), "timestamp": "1700000000", "entry": string(canon)}
				if diff := cmp.Diff(want, msgs[0].Values); diff != "" {
					t.Errorf("intake message (-want +got):\n%s", diff)
				}
				var back Entry
				if err := json.Unmarshal([]byte(msgs[0].Values["entry"].(string)), &back); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(*e, back); diff != "" {
					t.Errorf("entry in message (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestGet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newEnv(t, Config{})
	live := v.post(t, mk("t", withTTL(10)))
	dead := v.post(t, mk("t", withTTL(1)))
	retracted := v.post(t, mk("t", withTTL(1), withStatus(StatusRetracted)))
	v.clk.Advance(2 * time.Second)

	tests := map[string]struct {
		id      string
		wantErr error
	}{
		"live":                        {live, nil},
		"missing":                     {hexID(99), ErrNotFound},
		"bad id":                      {"nope", ErrInvalid},
		"expired":                     {dead, ErrNotFound},
		"expired again":               {dead, ErrNotFound},
		"lapsed but not active":       {retracted, ErrNotFound},
		"lapsed but not active again": {retracted, ErrNotFound},
	}
	for _, name := range []string{"live", "missing", "bad id", "expired", "expired again", "lapsed but not active", "lapsed but not active again"} {
		tc := tests[name]
		t.Run(name, func(t *testing.T) {
			got, err := v.s.Get(ctx, tc.id)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Get = %v, want %v", err, tc.wantErr)
			}
			if err == nil && got.ID != tc.id {
				t.Errorf("Get returned %q", got.ID)
			}
		})
	}
	// The lapsed ACTIVE entry was marked once, with one event; the retracted one kept its status.
	if got := v.hash(t, dead)["status"]; got != "expired" {
		t.Errorf("status = %q, want expired", got)
	}
	if got := v.hash(t, retracted)["status"]; got != "retracted" {
		t.Errorf("status = %q, want retracted", got)
	}
	want := []ev{{EventEntryExpired, "blackboard", `{"entry_id":"` + dead + `","topic":"t"}`}}
	if diff := cmp.Diff(want, v.events(t, EventEntryExpired)); diff != "" {
		t.Errorf("expired events (-want +got):\n%s", diff)
	}
	if got, _ := v.rdb.HGet(ctx, v.k.Stats(), "total_expired").Result(); got != "1" {
		t.Errorf("total_expired = %q, want 1", got)
	}
	if members := v.zmembers(t, v.k.Expiry()); len(members) != 1 || members[0] != live {
		t.Errorf("expiry index = %v, want only the live entry", members)
	}
}

func TestUpdate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	data := json.RawMessage(`{"v": 2}`)
	tags := []string{"z", "a"}
	meta := map[string]any{"m": "n"}
	tests := map[string]struct {
		u          Update
		wantEvents []string // field, old, new as `field old new`
		wantHash   map[string]string
	}{
		"data": {
			u:          Update{Data: &data},
			wantEvents: []string{`data {"v":1} {"v":2}`},
			wantHash:   map[string]string{"data": `{"v":2}`},
		},
		"confidence": {
			u:          Update{Confidence: new(0.25)},
			wantEvents: []string{`confidence 0.5 0.25`},
			wantHash:   map[string]string{"confidence": "0.25"},
		},
		"status": {
			u:          Update{Status: new(StatusConsumed)},
			wantEvents: []string{`status "active" "consumed"`},
			wantHash:   map[string]string{"status": "consumed"},
		},
		"priority": {
			u:          Update{Priority: new(Critical)},
			wantEvents: []string{`priority "NORMAL" "CRITICAL"`},
			wantHash:   map[string]string{"priority": "3"},
		},
		"tags sorted": {
			u:          Update{Tags: &tags},
			wantEvents: []string{`tags ["x"] ["a","z"]`},
			wantHash:   map[string]string{"tags": `["a","z"]`},
		},
		"metadata": {
			u:          Update{Metadata: &meta},
			wantEvents: []string{`metadata {"k":1} {"m":"n"}`},
			wantHash:   map[string]string{"metadata": `{"m":"n"}`},
		},
		"several, in the original's order": {
			u: Update{Metadata: &meta, Priority: new(Low), Confidence: new(1.0), Data: &data},
			wantEvents: []string{`data {"v":1} {"v":2}`, `confidence 0.5 1`, `priority "NORMAL" "LOW"`,
				`metadata {"k":1} {"m":"n"}`},
			wantHash: map[string]string{"data": `{"v":2}`, "confidence": "1", "priority": "0", "metadata": `{"m":"n"}`},
		},
		"unchanged values emit nothing": {
			u:          Update{Confidence: new(0.5), Status: new(StatusActive), Priority: new(Normal)},
			wantEvents: []string{},
			wantHash:   map[string]string{},
		},
		"empty update": {u: Update{}, wantEvents: []string{}, wantHash: map[string]string{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			v := newEnv(t, Config{})
			id := v.post(t, mk("t", withConf(0.5), withData(`{"v":1}`), withTags("x"), withMeta(map[string]any{"k": 1}), withTTL(60)))
			before := v.hash(t, id)
			if err := v.s.Update(ctx, id, tc.u); err != nil {
				t.Fatal(err)
			}
			got := []string{}
			for _, e := range v.events(t, EventEntryUpdated) {
				var p struct {
					EntryID string          `json:"entry_id"`
					Topic   string          `json:"topic"`
					Field   string          `json:"field"`
					Old     json.RawMessage `json:"old"`
					New     json.RawMessage `json:"new"`
				}
				if err := json.Unmarshal([]byte(e.Payload), &p); err != nil {
					t.Fatalf("payload %s: %v", e.Payload, err)
				}
				if p.EntryID != id || p.Topic != "t" || e.Source != "blackboard" {
					t.Errorf("event %+v", e)
				}
				got = append(got, p.Field+" "+string(p.Old)+" "+string(p.New))
			}
			if diff := cmp.Diff(tc.wantEvents, got); diff != "" {
				t.Errorf("updated events (-want +got):\n%s", diff)
			}
			after := v.hash(t, id)
			for k, want := range tc.wantHash {
				before[k] = want
			}
			if diff := cmp.Diff(before, after); diff != "" {
				t.Errorf("hash (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUpdateIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newEnv(t, Config{})
	id := v.post(t, mk("t", withTTL(60)))
	if err := v.s.Update(ctx, id, Update{Priority: new(Critical)}); err != nil {
		t.Fatal(err)
	}
	if got := v.zmembers(t, v.k.Prio(Normal)); len(got) != 0 {
		t.Errorf("prio:1 = %v, want empty", got)
	}
	if score, err := v.rdb.ZScore(ctx, v.k.Prio(Critical), id).Result(); err != nil || score != ts0 {
		t.Errorf("prio:3 score = %v, %v; want %v", score, err, ts0)
	}
	// Leaving ACTIVE drops the entry from the expiry index; returning restores it.
	if err := v.s.Update(ctx, id, Update{Status: new(StatusConsumed)}); err != nil {
		t.Fatal(err)
	}
	if got := v.zmembers(t, v.k.Expiry()); len(got) != 0 {
		t.Errorf("expiry = %v after consume, want empty", got)
	}
	if err := v.s.Update(ctx, id, Update{Status: new(StatusActive)}); err != nil {
		t.Fatal(err)
	}
	if score, err := v.rdb.ZScore(ctx, v.k.Expiry(), id).Result(); err != nil || score != ts0+60 {
		t.Errorf("expiry score = %v, %v; want %v", score, err, ts0+60)
	}
}

func TestUpdateErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newEnv(t, Config{})
	id := v.post(t, mk("t"))
	bad := json.RawMessage("{")
	tests := map[string]struct {
		id   string
		u    Update
		want error
	}{
		"missing":          {hexID(5), Update{Confidence: new(0.1)}, ErrNotFound},
		"missing, empty":   {hexID(5), Update{}, ErrNotFound},
		"bad id":           {"x", Update{}, ErrInvalid},
		"confidence NaN":   {id, Update{Confidence: new(nan())}, ErrInvalid},
		"confidence range": {id, Update{Confidence: new(-1.0)}, ErrInvalid},
		"status bogus":     {id, Update{Status: new(Status("gone"))}, ErrInvalid},
		"priority 9":       {id, Update{Priority: new(Priority(9))}, ErrInvalid},
		"data not JSON":    {id, Update{Data: &bad}, ErrInvalid},
		"metadata NaN":     {id, Update{Metadata: &map[string]any{"x": nan()}}, ErrInvalid},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if err := v.s.Update(ctx, tc.id, tc.u); !errors.Is(err, tc.want) {
				t.Errorf("Update = %v, want %v", err, tc.want)
			}
		})
	}
	if n := len(v.events(t, EventEntryUpdated)); n != 0 {
		t.Errorf("%d updated events, want 0", n)
	}
}

// TestUpdateEmit: the event follows the update's own events in the same
// step, with Emit's defaults; a refused update or event writes neither.
func TestUpdateEmit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newEnv(t, Config{})
	id := v.post(t, mk("t", withData(`{"v":1}`)))
	data := json.RawMessage(`{"v":2}`)
	if err := v.s.UpdateEmit(ctx, id, Update{Data: &data, Status: new(StatusConsumed)},
		Event{Type: "compute.job.finished", Source: "compute", Payload: json.RawMessage(`{"job":"x"}`)}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range v.events(t, "*") {
		got = append(got, e.Type+" "+e.Source)
	}
	want := []string{EventEntryAdded + " blackboard", EventEntryUpdated + " blackboard", EventEntryUpdated + " blackboard",
		"compute.job.finished compute"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if h := v.hash(t, id); h["data"] != `{"v":2}` || h["status"] != "consumed" {
		t.Errorf("entry after UpdateEmit: %v", h)
	}
	evs, _, err := v.s.Events(ctx, "0", "compute.job.finished", 10, 0)
	if err != nil || len(evs) != 1 {
		t.Fatalf("Events = %v, %v", evs, err)
	}
	if e := evs[0]; len(e.ID) != 32 || e.Timestamp != ts0 || string(e.Payload) != `{"job":"x"}` {
		t.Errorf("event %+v: want a 32-hex id, the clock's time and the payload", e)
	}

	// Refused: no such entry, a bad update, a bad event. Nothing is written.
	before := v.hash(t, id)
	n := len(v.events(t, "*"))
	bad := json.RawMessage("{")
	for name, tc := range map[string]struct {
		id   string
		u    Update
		ev   Event
		want error
	}{
		"missing":       {hexID(5), Update{Data: &data}, Event{Type: "x.y"}, ErrNotFound},
		"bad update":    {id, Update{Data: &bad}, Event{Type: "x.y"}, ErrInvalid},
		"no event type": {id, Update{Data: &data}, Event{}, ErrInvalid},
		"bad payload":   {id, Update{Data: &data}, Event{Type: "x.y", Payload: json.RawMessage(`[1]`)}, ErrInvalid},
	} {
		if err := v.s.UpdateEmit(ctx, tc.id, tc.u, tc.ev); !errors.Is(err, tc.want) {
			t.Errorf("%s: UpdateEmit = %v, want %v", name, err, tc.want)
		}
	}
	if m := len(v.events(t, "*")); m != n {
		t.Errorf("%d events after refused updates, want %d", m, n)
	}
	if diff := cmp.Diff(before, v.hash(t, id)); diff != "" {
		t.Errorf("entry changed by refused updates (-before +after):\n%s", diff)
	}
}

// TestUpdateUnlist: an update with Unlist takes the entry's id off that
// sorted set in its own step, only when it applies; a set of another
// board is refused.
func TestUpdateUnlist(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newEnv(t, Config{})
	id := v.post(t, mk("t", withData(`{"v":1}`)))
	list := v.k.JobsUnmirrored()
	other := hexID(6)
	if err := v.rdb.ZAdd(ctx, list, redis.Z{Score: 1, Member: id}, redis.Z{Score: 2, Member: other}).Err(); err != nil {
		t.Fatal(err)
	}
	members := func() []string {
		t.Helper()
		m, err := v.rdb.ZRange(ctx, list, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	data := json.RawMessage(`{"v":2}`)
	// Refused, so nothing is taken off: a status conflict, another
	// board's set.
	if err := v.s.UpdateIf(ctx, id, StatusConsumed, Update{Data: &data, Unlist: list}); !errors.Is(err, ErrConflict) {
		t.Fatalf("UpdateIf on an active entry = %v, want ErrConflict", err)
	}
	if err := v.s.Update(ctx, id, Update{Data: &data, Unlist: "elsewhere:jobs:unmirrored"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Update with another board's set = %v, want ErrInvalid", err)
	}
	if diff := cmp.Diff([]string{id, other}, members()); diff != "" {
		t.Fatalf("listed after refused updates (-want +got):\n%s", diff)
	}
	if err := v.s.UpdateEmit(ctx, id, Update{Data: &data, Unlist: list},
		Event{Type: "compute.job.finished", Source: "compute", Payload: json.RawMessage(`{"job":"x"}`)}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{other}, members()); diff != "" {
		t.Errorf("listed after the update (-want +got):\n%s", diff)
	}
	if h := v.hash(t, id); h["data"] != `{"v":2}` {
		t.Errorf("entry after the update: %v", h)
	}
}

// TestUpdateGuard: an update with a guard applies only while the guard's
// field holds its value, in the same atomic step; otherwise it writes
// nothing (no field, no event, no Unlist) and fails with ErrStale, also for
// an entry that is gone.
func TestUpdateGuard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newEnv(t, Config{})
	id := v.post(t, mk("t", withData(`{"v":1}`)))
	rec := v.k.Job("j1")
	if err := v.rdb.HSet(ctx, rec, "version", "3").Err(); err != nil {
		t.Fatal(err)
	}
	list := v.k.JobsUnmirrored()
	if err := v.rdb.ZAdd(ctx, list, redis.Z{Score: 1, Member: id}).Err(); err != nil {
		t.Fatal(err)
	}
	updated := func() int {
		t.Helper()
		n := 0
		for _, e := range v.events(t, "blackboard.entry.updated") {
			if strings.Contains(e.Payload, id) {
				n++
			}
		}
		return n
	}
	data := json.RawMessage(`{"v":2}`)
	fin := Event{Type: "compute.job.finished", Source: "compute", Payload: json.RawMessage(`{"job":"x"}`)}
	for _, g := range []*Guard{
		{Key: rec, Field: "version", Value: "2"},           // moved on
		{Key: rec, Field: "missing", Value: "3"},           // no such field
		{Key: v.k.Job("j2"), Field: "version", Value: "3"}, // no such HASH
	} {
		if err := v.s.UpdateEmit(ctx, id, Update{Data: &data, Unlist: list, Guard: g}, fin); !errors.Is(err, ErrStale) {
			t.Fatalf("update guarded by %+v = %v, want ErrStale", *g, err)
		}
	}
	gone := hexID(7)
	if err := v.s.Update(ctx, gone, Update{Data: &data, Guard: &Guard{Key: rec, Field: "version", Value: "2"}}); !errors.Is(err, ErrStale) {
		t.Fatalf("stale update of an entry that is gone = %v, want ErrStale", err)
	}
	if err := v.s.Update(ctx, id, Update{Data: &data, Guard: &Guard{Key: "elsewhere:job:j1", Field: "version", Value: "3"}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("update guarded by another board's key = %v, want ErrInvalid", err)
	}
	if h := v.hash(t, id); h["data"] != `{"v":1}` || updated() != 0 || len(v.events(t, "compute.job.finished")) != 0 {
		t.Fatalf("refused updates wrote: data %s, %d updated events, %d finished", h["data"], updated(), len(v.events(t, "compute.job.finished")))
	}
	if diff := cmp.Diff([]string{id}, v.zmembers(t, list)); diff != "" {
		t.Fatalf("listed after refused updates (-want +got):\n%s", diff)
	}
	if err := v.s.UpdateEmit(ctx, id, Update{Data: &data, Unlist: list, Guard: &Guard{Key: rec, Field: "version", Value: "3"}}, fin); err != nil {
		t.Fatal(err)
	}
	if h := v.hash(t, id); h["data"] != `{"v":2}` || updated() != 1 || len(v.events(t, "compute.job.finished")) != 1 || len(v.zmembers(t, list)) != 0 {
		t.Fatalf("the update whose guard holds: data %s, %d updated events, %d finished, listed %v",
			h["data"], updated(), len(v.events(t, "compute.job.finished")), v.zmembers(t, list))
	}
}

func TestUpdateIf(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := map[string]struct {
		status     Status
		expect     Status
		wantErr    error
		wantStatus string
	}{
		"matches":         {StatusActive, StatusActive, nil, "consumed"},
		"differs":         {StatusRetracted, StatusActive, ErrConflict, "retracted"},
		"expect consumed": {StatusConsumed, StatusConsumed, nil, "consumed"},
		"bad expectation": {StatusActive, Status("nope"), ErrInvalid, "active"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			v := newEnv(t, Config{})
			id := v.post(t, mk("t", withStatus(tc.status)))
			err := v.s.UpdateIf(ctx, id, tc.expect, Update{Status: new(StatusConsumed), Confidence: new(0.1)})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("UpdateIf = %v, want %v", err, tc.wantErr)
			}
			h := v.hash(t, id)
			if h["status"] != tc.wantStatus {
				t.Errorf("status = %q, want %q", h["status"], tc.wantStatus)
			}
			if wantConf := map[bool]string{true: "1", false: "0.1"}[err != nil]; h["confidence"] != wantConf {
				t.Errorf("confidence = %q, want %q", h["confidence"], wantConf)
			}
		})
	}
	v := newEnv(t, Config{})
	if err := v.s.UpdateIf(ctx, hexID(3), StatusActive, Update{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("UpdateIf(missing) = %v, want ErrNotFound", err)
	}
}

func TestRetract(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newEnv(t, Config{})
	id := v.post(t, mk("t"))
	if err := v.s.Retract(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := v.s.Retract(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := v.s.Retract(ctx, hexID(4)); !errors.Is(err, ErrNotFound) {
		t.Errorf("Retract(missing) = %v, want ErrNotFound", err)
	}
	got, err := v.s.Get(ctx, id)
	if err != nil || got.Status != StatusRetracted {
		t.Fatalf("Get = %v, %v; want retracted", got.Status, err)
	}
	want := []ev{{EventEntryUpdated, "blackboard",
		`{"entry_id":"` + id + `","topic":"t","field":"status","old":"active","new":"retracted"}`}}
	if diff := cmp.Diff(want, v.events(t, EventEntryUpdated)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestSupersede(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := map[string]struct {
		oldExists bool
		newID     string
		wantErr   error
	}{
		"ok":           {oldExists: true},
		"old missing":  {oldExists: false, wantErr: ErrNotFound},
		"new id taken": {oldExists: true, newID: hexID(50), wantErr: ErrConflict},
		"new invalid":  {oldExists: true, newID: "bad", wantErr: ErrInvalid},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			v := newEnv(t, Config{})
			v.post(t, mk("other", withID(hexID(50))))
			old := hexID(1)
			if tc.oldExists {
				v.post(t, mk("belief", withID(old), withTTL(100)))
			}
			eventsBefore := len(v.events(t, "*"))
			repl := mk("belief", withID(tc.newID), withConf(0.9))
			id, err := v.s.Supersede(ctx, old, repl)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Supersede = %v, want %v", err, tc.wantErr)
			}
			evs := v.events(t, "*")[eventsBefore:]
			if err != nil {
				if len(evs) != 0 {
					t.Errorf("failed supersede emitted %v", evs)
				}
				if tc.oldExists && v.hash(t, old)["status"] != "active" {
					t.Errorf("failed supersede changed the old entry: %v", v.hash(t, old))
				}
				if n, _ := v.rdb.ZCard(ctx, v.k.All()).Result(); n != map[bool]int64{true: 2, false: 1}[tc.oldExists] {
					t.Errorf("failed supersede left %d entries", n)
				}
				return
			}
			if v.hash(t, old)["status"] != "superseded" {
				t.Errorf("old status = %q", v.hash(t, old)["status"])
			}
			if got := v.zmembers(t, v.k.Expiry()); len(got) != 0 {
				t.Errorf("superseded entry still in expiry index: %v", got)
			}
			got, err := v.s.Get(ctx, id)
			if err != nil || got.ParentID != old || repl.ParentID != old {
				t.Errorf("new entry parent = %q (%v), want %q", got.ParentID, err, old)
			}
			want := []ev{
				{EventEntryUpdated, "blackboard", `{"entry_id":"` + old + `","topic":"belief","field":"status","old":"active","new":"superseded"}`},
				{EventEntryAdded, "blackboard", `{"entry_id":"` + id + `","topic":"belief","source_module":"m","priority":"NORMAL"}`},
			}
			if diff := cmp.Diff(want, evs); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSupersedeAtomic races supersedes of one entry: each must see the old
// entry and post its replacement in one step, so every replacement exists
// and the old entry ends superseded with one status event.
func TestSupersedeAtomic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newEnv(t, Config{})
	old := v.post(t, mk("belief"))
	const n = 16
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := v.s.Supersede(ctx, old, mk("belief"))
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if n, _ := v.rdb.ZCard(ctx, v.k.Topic("belief")).Result(); n != 17 {
		t.Errorf("topic holds %d entries, want 17", n)
	}
	if got := len(v.events(t, EventEntryUpdated)); got != 1 {
		t.Errorf("%d status events, want 1 (the rest found it already superseded)", got)
	}
}

func TestRemove(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newEnv(t, Config{})
	id := v.post(t, mk("a.b", withPrio(High), withTTL(10), withSource("src")))
	keep := v.post(t, mk("a.b"))
	if err := v.s.Remove(ctx, id, ""); err != nil {
		t.Fatal(err)
	}
	if h := v.hash(t, id); len(h) != 0 {
		t.Errorf("hash still there: %v", h)
	}
	for _, key := range []string{v.k.Source("src"), v.k.Prio(High), v.k.Expiry()} {
		if got := v.zmembers(t, key); len(got) != 0 {
			t.Errorf("%s = %v, want empty", key, got)
		}
	}
	for _, key := range []string{v.k.Topic("a.b"), v.k.All()} {
		if diff := cmp.Diff([]string{keep}, v.zmembers(t, key)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", key, diff)
		}
	}
	want := []ev{{EventEntryRemoved, "blackboard", `{"entry_id":"` + id + `","topic":"a.b","reason":"explicit"}`}}
	if diff := cmp.Diff(want, v.events(t, EventEntryRemoved)); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if err := v.s.Remove(ctx, keep, "obsolete"); err != nil {
		t.Fatal(err)
	}
	if got := v.events(t, EventEntryRemoved)[1].Payload; !strings.Contains(got, `"reason":"obsolete"`) {
		t.Errorf("payload %s lacks the reason", got)
	}
	if err := v.s.Remove(ctx, id, ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Remove = %v, want ErrNotFound", err)
	}
	stats, _ := v.rdb.HGetAll(ctx, v.k.Stats()).Result()
	if diff := cmp.Diff(map[string]string{"total_posted": "2", "total_removed": "2"}, stats); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
}

// inbox posts a compute request and reads it from its lane through the
// consumer group, as the broker does, returning the entry id and message id.
func inbox(t *testing.T, v env, opts ...func(*Entry)) (string, string) {
	t.Helper()
	ctx := context.Background()
	id := v.post(t, mk(RequestTopic, opts...))
	if err := v.rdb.XGroupCreateMkStream(ctx, v.k.ModuleInbox("m", 4), InboxGroup, "0").Err(); err != nil && !strings.Contains(err.Error(), "BUSYGROUP") {
		t.Fatal(err)
	}
	res, err := v.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: InboxGroup, Consumer: "c1",
		Streams: []string{v.k.ModuleInbox("m", 4), ">"}, Count: 1, Block: -1}).Result()
	if err != nil || len(res) != 1 || len(res[0].Messages) != 1 {
		t.Fatalf("XREADGROUP = %v, %v", res, err)
	}
	return id, res[0].Messages[0].ID
}

func pending(t *testing.T, v env) int64 {
	t.Helper()
	p, err := v.rdb.XPending(context.Background(), v.k.ModuleInbox("m", 4), InboxGroup).Result()
	if err != nil {
		t.Fatal(err)
	}
	return p.Count
}

func TestConsume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := map[string]struct {
		status      Status
		missing     bool
		badAck      bool
		wantErr     error
		wantPending int64
		wantStatus  string
		wantEvents  int
	}{
		"active":           {status: StatusActive, wantPending: 0, wantStatus: "consumed", wantEvents: 1},
		"already consumed": {status: StatusConsumed, wantPending: 0, wantStatus: "consumed", wantEvents: 0},
		"retracted":        {status: StatusRetracted, wantErr: ErrConflict, wantPending: 1, wantStatus: "retracted"},
		"missing":          {missing: true, wantErr: ErrNotFound, wantPending: 1},
		"foreign stream":   {status: StatusActive, badAck: true, wantErr: ErrInvalid, wantPending: 1, wantStatus: "active"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			v := newEnv(t, Config{})
			id, msg := inbox(t, v, withStatus(tc.status), withTTL(30))
			if tc.missing {
				if err := v.s.Remove(ctx, id, ""); err != nil {
					t.Fatal(err)
				}
			}
			ack := &StreamAck{Stream: v.k.ModuleInbox("m", 4), Group: InboxGroup, MessageID: msg}
			if tc.badAck {
				ack.Stream = "asi:bb:{elsewhere}:inbox:compute:p4"
			}
			err := v.s.Consume(ctx, id, ack)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Consume = %v, want %v", err, tc.wantErr)
			}
			if got := pending(t, v); got != tc.wantPending {
				t.Errorf("pending = %d, want %d", got, tc.wantPending)
			}
			if got := v.hash(t, id)["status"]; got != tc.wantStatus {
				t.Errorf("status = %q, want %q", got, tc.wantStatus)
			}
			evs := v.events(t, EventEntryUpdated)
			if len(evs) != tc.wantEvents {
				t.Fatalf("updated events = %v, want %d", evs, tc.wantEvents)
			}
			if tc.wantEvents == 1 {
				want := `{"entry_id":"` + id + `","topic":"compute.request","field":"status","old":"active","new":"consumed"}`
				if evs[0].Payload != want {
					t.Errorf("payload = %s, want %s", evs[0].Payload, want)
				}
				if got := v.zmembers(t, v.k.Expiry()); len(got) != 0 {
					t.Errorf("consumed entry still in expiry index")
				}
			}
		})
	}
	v := newEnv(t, Config{})
	id := v.post(t, mk("t"))
	if err := v.s.Consume(ctx, id, nil); err != nil {
		t.Errorf("Consume without ack = %v", err)
	}
}

func TestExpire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := map[string]struct {
		status      Status
		wantErr     error
		wantPending int64
		wantStatus  string
		wantEvents  int
	}{
		"active":          {status: StatusActive, wantStatus: "expired", wantEvents: 1},
		"already expired": {status: StatusExpired, wantStatus: "expired"},
		"consumed":        {status: StatusConsumed, wantErr: ErrConflict, wantPending: 1, wantStatus: "consumed"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			v := newEnv(t, Config{})
			id, msg := inbox(t, v, withStatus(tc.status), withTTL(3600))
			err := v.s.Expire(ctx, id, &StreamAck{Stream: v.k.ModuleInbox("m", 4), Group: InboxGroup, MessageID: msg})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Expire = %v, want %v", err, tc.wantErr)
			}
			if got := pending(t, v); got != tc.wantPending {
				t.Errorf("pending = %d, want %d", got, tc.wantPending)
			}
			if got := v.hash(t, id)["status"]; got != tc.wantStatus {
				t.Errorf("status = %q, want %q", got, tc.wantStatus)
			}
			if got := len(v.events(t, EventEntryExpired)); got != tc.wantEvents {
				t.Errorf("%d expired events, want %d", got, tc.wantEvents)
			}
		})
	}
	v := newEnv(t, Config{})
	if err := v.s.Expire(ctx, hexID(8), nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("Expire(missing) = %v, want ErrNotFound", err)
	}
}

func TestStatuses(t *testing.T) {
	s := newEnv(t, Config{}).s
	ctx := context.Background()
	a, err := s.Post(ctx, NewEntry("t", "m", json.RawMessage(`{}`)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := s.Post(ctx, NewEntry("t", "m", json.RawMessage(`{}`)))
	if err := s.Retract(ctx, b); err != nil {
		t.Fatal(err)
	}
	sts, err := s.Statuses(ctx, []string{a, b, "nope"})
	if err != nil || len(sts) != 3 || sts[0] != StatusActive || sts[1] != StatusRetracted || sts[2] != "" {
		t.Fatalf("statuses %v %v", sts, err)
	}
}

package broker

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/computeboard/computeboard/wire"
)

func TestInspector(t *testing.T) {
	bd := newBoard(t)
	b := bd.broker(t, Config{})
	ctx := t.Context()
	old := bd.post(t, "a", `{"command":["x"],"priority":3,"name":"old"}`)
	feed(t, b)
	bd.clk.Advance(time.Minute)
	bd.post(t, "b", `{"command":["x"],"priority":8}`)
	bd.post(t, "b", `{"command":["x"],"priority":3}`)
	bd.clk.Advance(time.Second)
	feed(t, b)
	bd.clk.Advance(time.Second)
	insp := b.Inspector()

	p3 := 3
	tests := map[string]struct {
		f    Filter
		want []string // modules in list order
	}{
		"all, hand-out order": {f: Filter{}, want: []string{"b", "a", "b"}},
		"by module":           {f: Filter{Module: "b"}, want: []string{"b", "b"}},
		"by priority":         {f: Filter{Priority: &p3}, want: []string{"a", "b"}},
		"by age":              {f: Filter{MinAge: 30 * time.Second}, want: []string{"a"}},
		"limit":               {f: Filter{Limit: 1}, want: []string{"b"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var got []string
			for _, h := range insp.List(tc.f) {
				got = append(got, h.Module)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("List (-want +got):\n%s", diff)
			}
		})
	}

	h, err := insp.Show(old)
	if err != nil || h.Request == nil || h.Request.Name != "old" || h.AgeSeconds < 60 || h.Lane != 3 {
		t.Fatalf("Show = %+v, %v", h, err)
	}
	if _, err := insp.Show("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Show(nope) = %v", err)
	}
	s, err := insp.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Held != 3 || s.ByPriority[3] != 2 || s.ByPriority[8] != 1 || s.ByModule["b"] != 2 ||
		s.OldestAgeSeconds < 60 || s.Lanes[3].Pending != 2 || s.Read != 3 {
		t.Errorf("Stats = %+v", s)
	}

	// Requeue only works on a handed-out request.
	if err := insp.Requeue(old); !errors.Is(err, ErrNotFound) {
		t.Errorf("Requeue of a queued request: %v", err)
	}
	d := next(t, b)
	if err := insp.Requeue(d.EntryID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Accept(ctx, d); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("Accept after requeue: %v", err)
	}

	// Drop → dead letter → replay → held again → accepted.
	if err := insp.Drop(ctx, old); err != nil {
		t.Fatal(err)
	}
	if jd, _ := bd.jobEntry(t, old); jd.Status != wire.JobCancelled || jd.Error.Code != ReasonDropped {
		t.Errorf("dropped job entry %+v", jd)
	}
	dls, err := insp.DLQList(ctx, "", 0)
	if err != nil || len(dls) != 1 || dls[0].Reason != ReasonDropped || dls[0].EntryID != old {
		t.Fatalf("DLQList = %+v, %v", dls, err)
	}
	if _, err := insp.DLQReplay(ctx, dls[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := insp.DLQReplay(ctx, dls[0].ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("second replay: %v", err)
	}
	feed(t, b)
	if _, ok := b.inbox.Get(old); !ok {
		t.Fatal("replayed request not held")
	}
	for b.inbox.Len() > 0 {
		accept(t, b, next(t, b))
	}
	if jd, _ := bd.jobEntry(t, old); jd.Status != wire.JobQueued {
		t.Errorf("replayed request's job entry %+v", jd)
	}
	if n, err := insp.DLQReplayAll(ctx); err != nil || n != 0 {
		t.Errorf("DLQReplayAll = %d, %v", n, err)
	}
}

func TestHTTP(t *testing.T) {
	bd := newBoard(t)
	b := bd.broker(t, Config{OperatorToken: "s3cret"})
	id := bd.post(t, "a", okData)
	bd.post(t, "b", okData)
	feed(t, b)
	srv := httptest.NewServer(b.Handler())
	defer srv.Close()
	readOnly := httptest.NewServer(bd.broker(t, Config{Consumer: "ro"}).Handler())
	defer readOnly.Close()

	do := func(base, method, path, token string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: content type %q", method, path, ct)
		}
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatalf("%s %s: not JSON: %s", method, path, body)
		}
		return resp.StatusCode, m
	}
	tests := []struct {
		name, base, method, path, token string
		wantStatus                      int
		wantErr                         string // error code, "" for success
	}{
		{"list", srv.URL, "GET", "/api/v1/inbox/items", "", 200, ""},
		{"list filtered", srv.URL, "GET", "/api/v1/inbox/items?module=a&priority=4&min_age=0s", "", 200, ""},
		{"bad priority", srv.URL, "GET", "/api/v1/inbox/items?priority=12", "", 400, "bad_request"},
		{"show", srv.URL, "GET", "/api/v1/inbox/items/" + id, "s3cret", 200, ""},
		{"show unknown", srv.URL, "GET", "/api/v1/inbox/items/ffffffffffffffffffffffffffffffff", "s3cret", 404, "not_found"},
		{"stats", srv.URL, "GET", "/api/v1/inbox/stats", "", 200, ""},
		{"dlq", srv.URL, "GET", "/api/v1/inbox/dlq", "s3cret", 200, ""},
		{"drop without token", srv.URL, "DELETE", "/api/v1/inbox/items/" + id, "", 401, "unauthorized"},
		{"drop wrong token", srv.URL, "DELETE", "/api/v1/inbox/items/" + id, "s3cre", 401, "unauthorized"},
		{"drop, no token configured", readOnly.URL, "DELETE", "/api/v1/inbox/items/" + id, "s3cret", 403, "forbidden"},
		{"drop", srv.URL, "DELETE", "/api/v1/inbox/items/" + id, "s3cret", 200, ""},
		{"drop again", srv.URL, "DELETE", "/api/v1/inbox/items/" + id, "s3cret", 404, "not_found"},
		{"requeue not handed out", srv.URL, "POST", "/api/v1/inbox/items/" + id + "/requeue", "s3cret", 404, "not_found"},
		{"replay all without token", srv.URL, "POST", "/api/v1/inbox/dlq/replay", "", 401, "unauthorized"},
		{"replay unknown", srv.URL, "POST", "/api/v1/inbox/dlq/1-1/replay", "s3cret", 404, "not_found"},
		{"replay all", srv.URL, "POST", "/api/v1/inbox/dlq/replay", "s3cret", 200, ""},
		{"unknown path", srv.URL, "GET", "/api/v1/inbox/nope", "", 404, "not_found"},
	}
	for _, tc := range tests {
		status, body := do(tc.base, tc.method, tc.path, tc.token)
		var gotErr string
		if e, ok := body["error"].(map[string]any); ok {
			gotErr, _ = e["code"].(string)
			if msg, _ := e["message"].(string); msg == "" {
				t.Errorf("%s: error without message", tc.name)
			}
		}
		if status != tc.wantStatus || gotErr != tc.wantErr {
			t.Errorf("%s: %d %q, want %d %q (%v)", tc.name, status, gotErr, tc.wantStatus, tc.wantErr, body)
		}
		switch tc.name {
		case "list":
			if items, _ := body["items"].([]any); len(items) != 2 {
				t.Errorf("list: %d items", len(items))
			}
		case "list filtered":
			if items, _ := body["items"].([]any); len(items) != 1 {
				t.Errorf("list filtered: %d items", len(items))
			}
		case "stats":
			if body["consumer"] != "b1" || body["held"] != 2.0 {
				t.Errorf("stats: %v", body)
			}
		case "replay all":
			if body["replayed"] != 1.0 {
				t.Errorf("replay all: %v", body)
			}
		}
	}
}

func TestMetrics(t *testing.T) {
	bd := newBoard(t)
	b := bd.broker(t, Config{ModuleRate: 1, ModuleBurst: 1})
	reg := prometheus.NewRegistry()
	if err := b.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	bd.post(t, "a", okData)
	bd.post(t, "a", okData) // rate limited
	bd.post(t, "b", `{"command":["x"],"priority":9}`)
	feed(t, b)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				if l.GetName() != "consumer" {
					labels = append(labels, l.GetName()+"="+l.GetValue())
				}
			}
			name := strings.TrimPrefix(mf.GetName(), metricPrefix)
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
			got[name] = v
		}
	}
	want := map[string]float64{
		"inbox_requests": 2, "inbox_capacity": 10000, "read_total": 3,
		"inbox_requests_by_priority{priority=9}": 1, "inbox_requests_by_module{module=a}": 1,
		"rejected_total{code=rate_limited}": 1, "dead_letters": 1, "lane_pending_requests{lane=4}": 1,
		"lane_unread_requests{lane=4}": 0, "dead_lettered_total": 1,
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, w)
		}
	}
}

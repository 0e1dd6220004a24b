package broker

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/wire"
)

// httpDo sends one request and returns the status, the Allow header and
// the decoded JSON body.
func httpDo(t *testing.T, base, method, path, auth string) (int, string, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, base+path, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("%s %s: not JSON: %.200s", method, path, body)
	}
	return resp.StatusCode, resp.Header.Get("Allow"), m
}

func errCode(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

// TestHTTPBounds: counts are capped, bad cursors, ids and counts are 400,
// wrong methods are 405 with Allow, sensitive reads need the token, and
// Bearer is matched case-insensitively.
func TestHTTPBounds(t *testing.T) {
	bd := newBoard(t)
	b := bd.broker(t, Config{OperatorToken: "s3cret"})
	id := bd.post(t, "a", `{"command":["x"],"environment":{"API_KEY":"hunter2"}}`)
	bd.post(t, "b", `{"command":["x"],"bogus":1}`) // dead-lettered
	feed(t, b)
	srv := httptest.NewServer(b.Handler())
	defer srv.Close()
	pbd := newBoard(t)
	pb := pbd.broker(t, Config{PublicReads: true})
	pid := pbd.post(t, "a", `{"command":["x"],"environment":{"API_KEY":"hunter2"}}`)
	pbd.post(t, "a", `{"command":["x"],"environment":{"API_KEY":"hunter2"},"bogus":1}`) // dead-lettered
	feed(t, pb)
	public := httptest.NewServer(pb.Handler())
	defer public.Close()

	tests := []struct {
		name, base, method, path, auth string
		wantStatus                     int
		wantErr                        string
		wantAllow                      string
	}{
		{"dlq count over the cap", srv.URL, "GET", "/api/v1/inbox/dlq?count=1000000", "Bearer s3cret", 400, "bad_request", ""},
		{"dlq count not a number", srv.URL, "GET", "/api/v1/inbox/dlq?count=x", "Bearer s3cret", 400, "bad_request", ""},
		{"dlq bad cursor", srv.URL, "GET", "/api/v1/inbox/dlq?after=garbage", "Bearer s3cret", 400, "bad_request", ""},
		{"dlq at the cap", srv.URL, "GET", "/api/v1/inbox/dlq?count=1000", "Bearer s3cret", 200, "", ""},
		{"dlq without token", srv.URL, "GET", "/api/v1/inbox/dlq", "", 401, "unauthorized", ""},
		{"dlq, lower-case bearer", srv.URL, "GET", "/api/v1/inbox/dlq", "bearer s3cret", 200, "", ""},
		{"dlq, upper-case bearer", srv.URL, "GET", "/api/v1/inbox/dlq", "BEARER s3cret", 200, "", ""},
		{"dlq public", public.URL, "GET", "/api/v1/inbox/dlq", "", 200, "", ""},
		{"show without token", srv.URL, "GET", "/api/v1/inbox/items/" + id, "", 401, "unauthorized", ""},
		{"show bad id", srv.URL, "GET", "/api/v1/inbox/items/ffff", "Bearer s3cret", 400, "bad_request", ""},
		{"list limit over the cap", srv.URL, "GET", "/api/v1/inbox/items?limit=5000", "", 400, "bad_request", ""},
		{"list without token", srv.URL, "GET", "/api/v1/inbox/items", "", 200, "", ""},
		{"stats without token", srv.URL, "GET", "/api/v1/inbox/stats", "", 200, "", ""},
		{"replay bad id", srv.URL, "POST", "/api/v1/inbox/dlq/nope/replay", "Bearer s3cret", 400, "bad_request", ""},
		{"wrong method on stats", srv.URL, "POST", "/api/v1/inbox/stats", "Bearer s3cret", 405, "method_not_allowed", "GET, HEAD"},
		{"wrong method on dlq", srv.URL, "DELETE", "/api/v1/inbox/dlq", "", 405, "method_not_allowed", "GET, HEAD"},
		{"wrong method on item", srv.URL, "PUT", "/api/v1/inbox/items/" + id, "", 405, "method_not_allowed", "DELETE, GET, HEAD"},
		{"wrong method on replay", srv.URL, "GET", "/api/v1/inbox/dlq/replay", "", 405, "method_not_allowed", "POST"},
	}
	for _, tc := range tests {
		status, allow, body := httpDo(t, tc.base, tc.method, tc.path, tc.auth)
		if status != tc.wantStatus || errCode(body) != tc.wantErr || allow != tc.wantAllow {
			t.Errorf("%s: %d %q Allow %q, want %d %q Allow %q (%v)", tc.name, status, errCode(body), allow,
				tc.wantStatus, tc.wantErr, tc.wantAllow, body)
		}
	}

	// Environment values are redacted for a caller without the token.
	_, _, body := httpDo(t, public.URL, "GET", "/api/v1/inbox/items/"+pid, "")
	if s, _ := json.Marshal(body); strings.Contains(string(s), "hunter2") || !strings.Contains(string(s), "API_KEY") {
		t.Errorf("public show: %s", s)
	}
	_, _, body = httpDo(t, public.URL, "GET", "/api/v1/inbox/dlq", "")
	if s, _ := json.Marshal(body); strings.Contains(string(s), "hunter2") || !strings.Contains(string(s), "API_KEY") {
		t.Errorf("public dead letters: %s", s)
	}
	_, _, body = httpDo(t, srv.URL, "GET", "/api/v1/inbox/items/"+id, "Bearer s3cret")
	if s, _ := json.Marshal(body); !strings.Contains(string(s), "hunter2") {
		t.Errorf("show with the token: %s", s)
	}
}

func TestAuthorized(t *testing.T) {
	tests := map[string]struct {
		header, token string
		want          bool
	}{
		"exact":              {"Bearer tok", "tok", true},
		"lower case scheme":  {"bearer tok", "tok", true},
		"mixed case scheme":  {"bEaReR tok", "tok", true},
		"wrong token":        {"Bearer tox", "tok", false},
		"token case matters": {"Bearer TOK", "tok", false},
		"no scheme":          {"tok", "tok", false},
		"basic":              {"Basic tok", "tok", false},
		"no token set":       {"Bearer ", "", false},
		"empty":              {"", "tok", false},
	}
	for name, tc := range tests {
		r := httptest.NewRequest("GET", "/", nil)
		if tc.header != "" {
			r.Header.Set("Authorization", tc.header)
		}
		if got := Authorized(r, tc.token); got != tc.want {
			t.Errorf("%s: Authorized = %v, want %v", name, got, tc.want)
		}
	}
}

func TestRedact(t *testing.T) {
	r := wire.Request{Environment: map[string]string{"A": "1", "B": "2"}}
	got := RedactRequest(r)
	if got.Environment["A"] != Redacted || got.Environment["B"] != Redacted || len(got.Environment) != 2 {
		t.Errorf("RedactRequest = %v", got.Environment)
	}
	if r.Environment["A"] != "1" {
		t.Error("RedactRequest changed its argument")
	}
	j := jobs.Job{Request: r}
	if rj := RedactJob(j); rj.Request.Environment["A"] != Redacted || j.Request.Environment["A"] != "1" {
		t.Errorf("RedactJob = %v (original %v)", rj.Request.Environment, j.Request.Environment)
	}
}

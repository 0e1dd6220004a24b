package adapter

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"strconv"

	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/wire"
)

// uiAssets is the operators' web dashboard served at /ui/: plain HTML, CSS
// and JavaScript with no build step and nothing loaded from elsewhere. It
// polls the JSON API (inbox, jobs, nodes, scheduler, fair share, the
// latest preemptions: preemptions.go); its writes (dead letter replay,
// dropping a held request) send the operator token the operator types
// into the page. integration/ui_test.go drives it in a headless Chromium.
//
//go:embed ui
var uiAssets embed.FS

// uiHandler serves the dashboard's files under /ui/.
func uiHandler() http.Handler {
	sub, err := fs.Sub(uiAssets, "ui")
	if err != nil {
		panic(err) // the embedded tree always has ui/
	}
	files := http.StripPrefix("/ui/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// Everything comes from this adapter: no inline script, no CDN.
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}

// jobSummary is one job of GET /api/v1/jobs: the record without its
// request (no payload, no environment), so the list is a public read.
type jobSummary struct {
	JobID       string          `json:"job_id"`
	Account     string          `json:"account"`
	Module      string          `json:"module"`
	Priority    int             `json:"priority"`
	Status      wire.JobStatus  `json:"status"`
	Attempt     int             `json:"attempt"`
	Node        string          `json:"node"`
	Provider    string          `json:"provider,omitempty"` // of the running task (its handle's)
	SubmittedAt *float64        `json:"submitted_at"`
	AcceptedAt  float64         `json:"accepted_at"`
	StartedAt   *float64        `json:"started_at"`
	Explanation json.RawMessage `json:"explanation"`
}

// accountShare is one configured fair-share account.
type accountShare struct {
	Name   string  `json:"name"`
	Parent string  `json:"parent,omitempty"`
	Shares float64 `json:"shares"`
}

// maxJobList bounds GET /api/v1/jobs?limit=.
const maxJobList = 1000

// listJobs serves GET /api/v1/jobs?status=&limit=: the active (not yet
// terminal) jobs, oldest acceptance first, in brief, with the configured
// fair-share accounts.
func (p *poolMember) listJobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	status := wire.JobStatus(q.Get("status"))
	switch status {
	case "", wire.JobQueued, wire.JobRunning:
	default:
		writeJSON(w, http.StatusBadRequest, apiError("bad_request", "status must be queued or running (the list holds active jobs only)"))
		return
	}
	limit := 100
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > maxJobList {
			writeJSON(w, http.StatusBadRequest, apiError("bad_request", "limit must be an integer 0..1000 (0: the default, 100)"))
			return
		}
		if n > 0 {
			limit = n
		}
	}
	// A public read: only the page's records are read whole (the others'
	// status at most), however many jobs are active.
	page, total, err := p.jobs.ActivePage(r.Context(), status, limit)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, apiError("internal", err.Error()))
		return
	}
	out := []jobSummary{}
	for _, j := range page {
		if len(j.Explanation) == 0 {
			j.Explanation = nil
		}
		var h providers.Handle
		if j.Handle != "" {
			_ = json.Unmarshal([]byte(j.Handle), &h) // unreadable: no provider shown
		}
		out = append(out, jobSummary{JobID: j.JobID, Account: j.Account, Module: j.Module, Priority: j.Priority,
			Status: j.Status, Attempt: j.Attempt, Node: j.Node, Provider: h.Provider, SubmittedAt: j.SubmittedAt,
			AcceptedAt: j.AcceptedAt, StartedAt: j.StartedAt, Explanation: j.Explanation})
	}
	accts := []accountShare{}
	for _, a := range p.cfg.Accounts {
		accts = append(accts, accountShare{Name: a.Name, Parent: a.Parent, Shares: a.Shares})
	}
	writeJSON(w, http.StatusOK, map[string]any{"jobs": out, "total": total, "accounts": accts})
}

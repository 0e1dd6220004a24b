package broker

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/wire"
)

// Handler serves the operator API under /api/v1/inbox/:
//
//	GET    /api/v1/inbox/items?module=&priority=&min_age=30s&limit=  List (public)
//	GET    /api/v1/inbox/items/{id}                                  Show (sensitive)
//	DELETE /api/v1/inbox/items/{id}                                  Drop (change)
//	POST   /api/v1/inbox/items/{id}/requeue                          Requeue (change)
//	GET    /api/v1/inbox/stats                                       Stats (public)
//	GET    /api/v1/inbox/dlq?after=&count=                           DLQList (sensitive)
//	POST   /api/v1/inbox/dlq/{id}/replay                             DLQReplay (change)
//	POST   /api/v1/inbox/dlq/replay?count=&after=                    DLQReplayAll, or one batch (change)
//
// Public reads need no token. Sensitive reads (they show request payloads
// and environments) need "Authorization: Bearer <Config.OperatorToken>"
// unless Config.PublicReads is set; changes always need it (401 without a
// valid token; 403 when no token is configured). Environment values are
// redacted for a caller without the token. A list takes at most
// maxListCount items (default defaultListCount) and a dead-letter page at
// most about maxResponseBytes; a wrong method is 405 with an Allow header;
// a malformed id, cursor or count is 400. Errors are JSON:
// {"error": {"code": "...", "message": "..."}}.
func (b *Broker) Handler() http.Handler {
	h := &handler{i: b.Inspector(), token: b.cfg.OperatorToken, public: b.cfg.PublicReads,
		entryBytes: b.cfg.DLQEntryBytes}
	mux := http.NewServeMux()
	for _, rt := range []struct {
		path    string
		methods map[string]http.HandlerFunc
	}{
		{"/api/v1/inbox/items", map[string]http.HandlerFunc{"GET": h.list}},
		{"/api/v1/inbox/items/{id}", map[string]http.HandlerFunc{"GET": h.sensitive(h.show), "DELETE": h.change(h.drop)}},
		{"/api/v1/inbox/items/{id}/requeue", map[string]http.HandlerFunc{"POST": h.change(h.requeue)}},
		{"/api/v1/inbox/stats", map[string]http.HandlerFunc{"GET": h.stats}},
		{"/api/v1/inbox/dlq", map[string]http.HandlerFunc{"GET": h.sensitive(h.dlqList)}},
		{"/api/v1/inbox/dlq/{id}/replay", map[string]http.HandlerFunc{"POST": h.change(h.dlqReplay)}},
		{"/api/v1/inbox/dlq/replay", map[string]http.HandlerFunc{"POST": h.change(h.dlqReplayAll)}},
	} {
		mux.HandleFunc(rt.path, methods(rt.methods))
	}
	mux.HandleFunc("/api/v1/inbox/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
	return mux
}

// HTTP bounds: a list or dead-letter page takes defaultListCount items
// unless the caller asks for up to maxListCount; a dead-letter page stops
// once its entries reach maxResponseBytes (at least one is returned).
const (
	defaultListCount = 100
	maxListCount     = 1000
	maxResponseBytes = 4 << 20
)

// methods dispatches on the request method; any other method is 405 with
// an Allow header (GET implies HEAD).
func methods(m map[string]http.HandlerFunc) http.HandlerFunc {
	var allow []string
	for k := range m {
		allow = append(allow, k)
		if k == http.MethodGet {
			allow = append(allow, http.MethodHead)
		}
	}
	slices.Sort(allow)
	allowed := strings.Join(allow, ", ")
	return func(w http.ResponseWriter, r *http.Request) {
		method := r.Method
		if method == http.MethodHead {
			method = http.MethodGet
		}
		if f, ok := m[method]; ok {
			f(w, r)
			return
		}
		w.Header().Set("Allow", allowed)
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed",
			r.Method+" is not allowed on "+r.URL.Path+"; allowed: "+allowed)
	}
}

type handler struct {
	i          *Inspector
	token      string
	public     bool // Config.PublicReads
	entryBytes int  // Config.DLQEntryBytes: longer entries are cut in responses
}

// Authorized reports whether r carries "Authorization: Bearer <token>"
// (the scheme matched case-insensitively, the token compared in constant
// time). An empty token authorizes nothing. The adapter's own API uses it
// so that both APIs check the token the same way.
func Authorized(r *http.Request, token string) bool {
	if token == "" {
		return false
	}
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(token)) == 1
}

// Redacted replaces each environment value in a response to a caller
// without the operator token.
const Redacted = "[redacted]"

// RedactRequest returns r with every environment value replaced by
// Redacted (the names stay); r itself is not changed.
func RedactRequest(r wire.Request) wire.Request {
	if len(r.Environment) == 0 {
		return r
	}
	env := make(map[string]string, len(r.Environment))
	for k := range r.Environment {
		env[k] = Redacted
	}
	r.Environment = env
	return r
}

// RedactJob returns j with its request's environment values redacted
// (RedactRequest), for a reader without the operator token.
func RedactJob(j jobs.Job) jobs.Job {
	j.Request = RedactRequest(j.Request)
	return j
}

// change guards an endpoint that changes state: the token is required.
func (h *handler) change(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.token == "" {
			writeError(w, http.StatusForbidden, "forbidden", "no operator token is configured; the API is read-only")
			return
		}
		if !Authorized(r, h.token) {
			unauthorized(w)
			return
		}
		next(w, r)
	}
}

// sensitive guards a read that shows request payloads: the token is
// required unless reads are public.
func (h *handler) sensitive(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		switch {
		case h.public || Authorized(r, h.token):
			next(w, r)
		case h.token == "":
			writeError(w, http.StatusForbidden, "forbidden",
				"this read shows request payloads: it needs an operator token, and none is configured (or enable public reads)")
		default:
			unauthorized(w)
		}
	}
}

func unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="computeboard"`)
	writeError(w, http.StatusUnauthorized, "unauthorized", "a valid bearer token is required")
}

// countParam reads a count or limit query parameter: default when absent,
// 400 outside 1..maxListCount (0 means the default).
func countParam(w http.ResponseWriter, r *http.Request, name string) (int, bool) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return defaultListCount, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > maxListCount {
		writeError(w, http.StatusBadRequest, "bad_request",
			fmt.Sprintf("%s must be an integer 0..%d (0: the default, %d)", name, maxListCount, defaultListCount))
		return 0, false
	}
	if n == 0 {
		n = defaultListCount
	}
	return n, true
}

// validStreamID reports whether s is a stream id, "<ms>" or "<ms>-<seq>".
func validStreamID(s string) bool {
	ms, seq, hasSeq := strings.Cut(s, "-")
	if _, err := strconv.ParseUint(ms, 10, 64); err != nil {
		return false
	}
	if hasSeq {
		if _, err := strconv.ParseUint(seq, 10, 64); err != nil {
			return false
		}
	}
	return true
}

func (h *handler) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := Filter{Module: q.Get("module")}
	if s := q.Get("priority"); s != "" {
		p, err := strconv.Atoi(s)
		if err != nil || p < 0 || p >= NumPriorities {
			writeError(w, http.StatusBadRequest, "bad_request", "priority must be an integer 0..9")
			return
		}
		f.Priority = &p
	}
	if s := q.Get("min_age"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad_request", "min_age must be a duration such as 30s")
			return
		}
		f.MinAge = d
	}
	n, ok := countParam(w, r, "limit")
	if !ok {
		return
	}
	f.Limit = n
	items := h.i.List(f)
	if items == nil {
		items = []Held{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items})
}

func (h *handler) show(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !blackboard.ValidID(id) {
		writeError(w, http.StatusBadRequest, "bad_request", "an entry id is 32 lowercase hex characters")
		return
	}
	it, err := h.i.Show(id)
	if err != nil {
		writeErr(w, err)
		return
	}
	if it.Request != nil && !Authorized(r, h.token) {
		req := RedactRequest(*it.Request)
		it.Request = &req
	}
	writeJSON(w, http.StatusOK, it)
}

func (h *handler) drop(w http.ResponseWriter, r *http.Request) {
	if !blackboard.ValidID(r.PathValue("id")) {
		writeError(w, http.StatusBadRequest, "bad_request", "an entry id is 32 lowercase hex characters")
		return
	}
	if err := h.i.Drop(r.Context(), r.PathValue("id")); err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"dropped": r.PathValue("id")})
}

func (h *handler) requeue(w http.ResponseWriter, r *http.Request) {
	if !blackboard.ValidID(r.PathValue("id")) {
		writeError(w, http.StatusBadRequest, "bad_request", "an entry id is 32 lowercase hex characters")
		return
	}
	if err := h.i.Requeue(r.PathValue("id")); err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"requeued": r.PathValue("id")})
}

func (h *handler) stats(w http.ResponseWriter, r *http.Request) {
	s, err := h.i.Stats(r.Context())
	if err != nil {
		writeErr(w, err)
		return
	}
	if len(s.ByModule) > maxListCount { // bounded like a list: the largest, the rest summed
		top, other := topModules(s.ByModule, maxListCount)
		by := make(map[string]int, len(top)+1)
		for _, m := range top {
			by[m] = s.ByModule[m]
		}
		by[OtherModules] = other
		s.ByModule = by
	}
	writeJSON(w, http.StatusOK, s)
}

func (h *handler) dlqList(w http.ResponseWriter, r *http.Request) {
	after := r.URL.Query().Get("after")
	if after != "" && !validStreamID(after) {
		writeError(w, http.StatusBadRequest, "bad_request", "after must be a dead-letter id such as 1767225600000-0")
		return
	}
	n, ok := countParam(w, r, "count")
	if !ok {
		return
	}
	dls, err := h.i.DLQList(r.Context(), after, n)
	if err != nil {
		writeErr(w, err)
		return
	}
	full := len(dls) == n
	redact := !Authorized(r, h.token)
	size := 0
	for k := range dls {
		dls[k] = capDeadLetter(dls[k], h.entryBytes)
		if redact {
			dls[k].Entry = redactEntryJSON(dls[k].Entry)
		}
		size += len(dls[k].Entry) + len(dls[k].Message) + 256
		if size > maxResponseBytes && k+1 < len(dls) {
			dls, full = dls[:k+1], true
			break
		}
	}
	next := ""
	if full && len(dls) > 0 {
		next = dls[len(dls)-1].ID
	}
	writeJSON(w, http.StatusOK, map[string]any{"dead_letters": dls, "next": next})
}

// capDeadLetter cuts an entry longer than limit (a dead letter written
// before entries were truncated at write) to its first limit bytes, as a
// JSON string, with its size and digest, as a dead letter written now
// would keep it.
func capDeadLetter(dl DeadLetter, limit int) DeadLetter {
	if limit <= 0 || len(dl.Entry) <= limit || dl.Truncated {
		return dl
	}
	raw := []byte(dl.Entry)
	var s string
	if json.Unmarshal(raw, &s) == nil { // the entry was kept as a JSON string
		raw = []byte(s)
	}
	if len(raw) <= limit {
		return dl
	}
	dl.EntryBytes, dl.EntryDigest, dl.Truncated = len(raw), digest(raw), true
	dl.Entry, _ = json.Marshal(strings.ToValidUTF8(string(raw[:limit]), ""))
	return dl
}

// redactEntryJSON replaces the environment values of a dead letter's
// entry (canonical entry JSON, its data the request). An entry that cannot
// be read (truncated, not JSON) but may name an environment is withheld.
func redactEntryJSON(e json.RawMessage) json.RawMessage {
	var entry map[string]json.RawMessage
	var data map[string]json.RawMessage
	if json.Unmarshal(e, &entry) != nil || json.Unmarshal(entry["data"], &data) != nil {
		if bytes.Contains(e, []byte("environment")) {
			return json.RawMessage(`"` + Redacted + `: the entry is not readable JSON and may hold an environment"`)
		}
		return e
	}
	var env map[string]any
	if json.Unmarshal(data["environment"], &env) != nil || len(env) == 0 {
		return e
	}
	for k := range env {
		env[k] = Redacted
	}
	data["environment"], _ = json.Marshal(env)
	entry["data"], _ = json.Marshal(data)
	out, err := json.Marshal(entry)
	if err != nil {
		return e
	}
	return out
}

func (h *handler) dlqReplay(w http.ResponseWriter, r *http.Request) {
	if !validStreamID(r.PathValue("id")) {
		writeError(w, http.StatusBadRequest, "bad_request", "a dead-letter id looks like 1767225600000-0")
		return
	}
	id, err := h.i.DLQReplay(r.Context(), r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"replayed": r.PathValue("id"), "message_id": id})
}

// dlqReplayAll replays every dead letter, or with count (and after, a
// cursor) one batch of them, saying where to go on from and whether the
// stream's end was reached.
func (h *handler) dlqReplayAll(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	after := q.Get("after")
	if after != "" && !validStreamID(after) {
		writeError(w, http.StatusBadRequest, "bad_request", "after must be a dead-letter id such as 1767225600000-0")
		return
	}
	if q.Get("count") == "" && after == "" {
		n, err := h.i.DLQReplayAll(r.Context())
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"replayed": n, "done": true})
		return
	}
	max, ok := countParam(w, r, "count")
	if !ok {
		return
	}
	n, looked, next, err := h.i.DLQReplayBatch(r.Context(), after, max)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"replayed": n, "looked_at": looked, "next": next, "done": looked < max})
}

func writeErr(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", err.Error())
	case errors.Is(err, ErrTruncated):
		writeError(w, http.StatusConflict, "truncated", err.Error())
	case errors.Is(err, ErrConflict):
		writeError(w, http.StatusConflict, "conflict", err.Error())
	default:
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
	}
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

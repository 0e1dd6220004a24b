package broker

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Handler serves the operator API under /api/v1/inbox/:
//
//	GET    /api/v1/inbox/items?module=&priority=&min_age=30s&limit=  List
//	GET    /api/v1/inbox/items/{id}                                  Show
//	DELETE /api/v1/inbox/items/{id}                                  Drop
//	POST   /api/v1/inbox/items/{id}/requeue                          Requeue
//	GET    /api/v1/inbox/stats                                       Stats
//	GET    /api/v1/inbox/dlq?after=&count=                           DLQList
//	POST   /api/v1/inbox/dlq/{id}/replay                             DLQReplay
//	POST   /api/v1/inbox/dlq/replay                                  DLQReplayAll
//
// GETs need no token. POST and DELETE need "Authorization: Bearer
// <Config.OperatorToken>" (401 without it; 403 when no token is
// configured). Errors are JSON: {"error": {"code": "...", "message": "..."}}.
func (b *Broker) Handler() http.Handler {
	i := b.Inspector()
	h := &handler{i: i, token: b.cfg.OperatorToken}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/inbox/items", h.list)
	mux.HandleFunc("GET /api/v1/inbox/items/{id}", h.show)
	mux.HandleFunc("DELETE /api/v1/inbox/items/{id}", h.auth(h.drop))
	mux.HandleFunc("POST /api/v1/inbox/items/{id}/requeue", h.auth(h.requeue))
	mux.HandleFunc("GET /api/v1/inbox/stats", h.stats)
	mux.HandleFunc("GET /api/v1/inbox/dlq", h.dlqList)
	mux.HandleFunc("POST /api/v1/inbox/dlq/{id}/replay", h.auth(h.dlqReplay))
	mux.HandleFunc("POST /api/v1/inbox/dlq/replay", h.auth(h.dlqReplayAll))
	mux.HandleFunc("/api/v1/inbox/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
	return mux
}

type handler struct {
	i     *Inspector
	token string
}

func (h *handler) auth(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.token == "" {
			writeError(w, http.StatusForbidden, "forbidden", "no operator token is configured; the API is read-only")
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(h.token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="computeboard"`)
			writeError(w, http.StatusUnauthorized, "unauthorized", "a valid bearer token is required")
			return
		}
		next(w, r)
	}
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
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, "bad_request", "limit must be a non-negative integer")
			return
		}
		f.Limit = n
	}
	items := h.i.List(f)
	if items == nil {
		items = []Held{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items})
}

func (h *handler) show(w http.ResponseWriter, r *http.Request) {
	it, err := h.i.Show(r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, it)
}

func (h *handler) drop(w http.ResponseWriter, r *http.Request) {
	if err := h.i.Drop(r.Context(), r.PathValue("id")); err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"dropped": r.PathValue("id")})
}

func (h *handler) requeue(w http.ResponseWriter, r *http.Request) {
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
	writeJSON(w, http.StatusOK, s)
}

func (h *handler) dlqList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	n := 0
	if s := q.Get("count"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, "bad_request", "count must be a non-negative integer")
			return
		}
	}
	dls, err := h.i.DLQList(r.Context(), q.Get("after"), n)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"dead_letters": dls})
}

func (h *handler) dlqReplay(w http.ResponseWriter, r *http.Request) {
	id, err := h.i.DLQReplay(r.Context(), r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"replayed": r.PathValue("id"), "message_id": id})
}

func (h *handler) dlqReplayAll(w http.ResponseWriter, r *http.Request) {
	n, err := h.i.DLQReplayAll(r.Context())
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"replayed": n})
}

func writeErr(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, ErrNotFound):
		writeError(w, http.StatusNotFound, "not_found", err.Error())
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

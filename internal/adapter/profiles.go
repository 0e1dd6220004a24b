package adapter

import (
	"net/http"
	"net/http/pprof"
	"strings"

	"github.com/computeboard/computeboard/broker"
)

// profiles serves the Go runtime's profiles under /debug/pprof/ (the
// handlers of net/http/pprof, on this mux, not http.DefaultServeMux) to
// callers with the operator token, when on (http.profiling). The command
// line is not served: it may carry a Redis URL with its password.
func profiles(token string, on bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token == "" {
			writeJSON(w, http.StatusForbidden, apiError("forbidden", "profiles are served to the operator token only, and none is configured"))
			return
		}
		if !broker.Authorized(r, token) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="computeboard"`)
			writeJSON(w, http.StatusUnauthorized, apiError("unauthorized", "profiles need Authorization: Bearer <operator token>"))
			return
		}
		if !on {
			writeJSON(w, http.StatusNotFound, apiError("not_found", "profiles are off: set http.profiling in the config"))
			return
		}
		switch name := strings.TrimPrefix(r.URL.Path, "/debug/pprof/"); name {
		case "":
			pprof.Index(w, r)
		case "profile":
			pprof.Profile(w, r)
		case "trace":
			pprof.Trace(w, r)
		case "symbol":
			pprof.Symbol(w, r)
		case "cmdline":
			writeJSON(w, http.StatusNotFound, apiError("not_found", "the command line is not served: it may hold secrets"))
		default:
			pprof.Handler(name).ServeHTTP(w, r)
		}
	})
}

package integration

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/wire"
)

// route is one method on one path pattern, with who may call it: public,
// sensitive (the token unless reads are public) or change (the token).
type route struct {
	method, path, auth string
}

func (r route) String() string { return r.method + " " + r.path }

// inboxSubtree is the pattern under which apiHandler hands requests to
// broker.Handler.
const inboxSubtree = "/api/v1/inbox/"

// parseGo parses one source file of the repository.
func parseGo(t *testing.T, rel string) *ast.File {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(repoRoot(t), rel), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// funcDecl finds the function (or method) name in f.
func funcDecl(t *testing.T, f *ast.File, name string) *ast.FuncDecl {
	t.Helper()
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == name {
			return fd
		}
	}
	t.Fatalf("no func %s in %s", name, f.Name.Name)
	return nil
}

// muxPatterns lists the patterns of every mux.Handle / mux.HandleFunc call
// in fn. A pattern that is not a string literal fails the test, so a route
// cannot hide from it; ones that are (broker's loop over its table) are
// returned as "" for the caller to account for.
func muxPatterns(t *testing.T, fn *ast.FuncDecl) []string {
	t.Helper()
	var out []string
	ast.Inspect(fn, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || (sel.Sel.Name != "Handle" && sel.Sel.Name != "HandleFunc") || len(call.Args) != 2 {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "mux" {
			return true
		}
		lit, ok := call.Args[0].(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			out = append(out, "")
			return true
		}
		s, err := strconv.Unquote(lit.Value)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
		return true
	})
	return out
}

// registeredRoutes reads the routes the server registers from the source:
// apiHandler's registrations in internal/adapter/member.go, and the route
// table of broker.Handler in broker/http.go (behind /api/v1/inbox/).
func registeredRoutes(t *testing.T) []route {
	t.Helper()
	var out []route
	delegates := false
	for _, p := range muxPatterns(t, funcDecl(t, parseGo(t, "internal/adapter/member.go"), "apiHandler")) {
		method, path, ok := strings.Cut(p, " ")
		switch {
		case p == "":
			t.Fatal("apiHandler registers a route whose pattern is not a string literal: this test cannot check it")
		case p == inboxSubtree:
			delegates = true
		case !ok:
			t.Fatalf("apiHandler registers %q without a method: give it one, or teach this test", p)
		default:
			// GET /api/v1/jobs/{id} checks the token itself, as the
			// broker's sensitive reads do, and the profiles want it
			// always; every other route is public.
			auth := "public"
			switch p {
			case "GET /api/v1/jobs/{id}":
				auth = "sensitive"
			case "GET /debug/pprof/": // profiles: the token always
				auth = "operator"
			}
			out = append(out, route{method, path, auth})
		}
	}
	if !delegates {
		t.Fatalf("apiHandler no longer delegates %s to the broker: update this test", inboxSubtree)
	}

	handler := funcDecl(t, parseGo(t, "broker/http.go"), "Handler")
	for _, p := range muxPatterns(t, handler) {
		if p != "" && p != inboxSubtree { // the table's loop, and the not-found catch-all
			t.Fatalf("broker.Handler registers %q outside its route table: add it to the table", p)
		}
	}
	n := 0
	ast.Inspect(handler, func(nd ast.Node) bool {
		// A table row: {"<path>", map[string]http.HandlerFunc{"GET": h.x, "POST": h.change(h.y)}}.
		cl, ok := nd.(*ast.CompositeLit)
		if !ok || len(cl.Elts) != 2 {
			return true
		}
		lit, ok1 := cl.Elts[0].(*ast.BasicLit)
		m, ok2 := cl.Elts[1].(*ast.CompositeLit)
		if !ok1 || !ok2 || lit.Kind != token.STRING {
			return true
		}
		if _, ok := m.Type.(*ast.MapType); !ok {
			return true
		}
		path, _ := strconv.Unquote(lit.Value)
		if !strings.HasPrefix(path, inboxSubtree) {
			t.Errorf("broker route %s is not under %s, where apiHandler delegates", path, inboxSubtree)
		}
		for _, e := range m.Elts {
			kv := e.(*ast.KeyValueExpr)
			method, _ := strconv.Unquote(kv.Key.(*ast.BasicLit).Value)
			auth := "public"
			if c, ok := kv.Value.(*ast.CallExpr); ok {
				auth = c.Fun.(*ast.SelectorExpr).Sel.Name // h.sensitive(…) or h.change(…)
			}
			out = append(out, route{method, path, auth})
			n++
		}
		return false
	})
	if n == 0 {
		t.Fatal("found no route table in broker.Handler: update this test to read it")
	}
	return out
}

// openAPIDoc is the part of the document the checks read.
type openAPIDoc struct {
	OpenAPI string                                 `json:"openapi"`
	Paths   map[string]map[string]openAPIOperation `json:"paths"`
}

type openAPIOperation struct {
	OperationID string             `json:"operationId"`
	Security    []map[string][]any `json:"security"`
	Auth        string             `json:"x-computeboard-auth"`
	Parameters  []map[string]any   `json:"parameters"`
	Responses   map[string]any     `json:"responses"`
}

var httpMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// documentedRoutes lists the document's path+method pairs.
func documentedRoutes(t *testing.T, doc openAPIDoc) []route {
	t.Helper()
	var out []route
	for path, item := range doc.Paths {
		for m, op := range item {
			if !slices.Contains(httpMethods, m) {
				continue // parameters, summary, …
			}
			out = append(out, route{strings.ToUpper(m), path, op.Auth})
		}
	}
	slices.SortFunc(out, func(a, b route) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// jsonPointer resolves a JSON pointer fragment ("/a/b~1c") in v.
func jsonPointer(v any, ptr string) (any, error) {
	if ptr == "" {
		return v, nil
	}
	for _, tok := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[tok]; !ok {
				return nil, fmt.Errorf("no %q", tok)
			}
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return nil, fmt.Errorf("no index %q", tok)
			}
			v = x[i]
		default:
			return nil, fmt.Errorf("%q inside a scalar", tok)
		}
	}
	return v, nil
}

// collectRefs lists every $ref value in v.
func collectRefs(v any, out *[]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && k == "$ref" {
				*out = append(*out, s)
			}
			collectRefs(e, out)
		}
	case []any:
		for _, e := range x {
			collectRefs(e, out)
		}
	}
}

// TestOpenAPIDocumentIsValid: the document is OpenAPI 3.1.0 JSON, every
// $ref resolves (in the document, or in a wire/schema file by its $id),
// operation ids are unique, every path parameter is declared, and the
// security of each operation matches its x-computeboard-auth.
func TestOpenAPIDocumentIsValid(t *testing.T) {
	t.Parallel()
	var tree any
	raw := readRepoJSON(t, "internal/adapter/openapi.json", &tree)
	var doc openAPIDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Errorf("openapi = %q, want 3.1.0", doc.OpenAPI)
	}

	// The wire schemas, by $id.
	byID := map[string]any{}
	files, _ := filepath.Glob(filepath.Join(repoRoot(t), "wire/schema/*.json"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var s map[string]any
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		byID[s["$id"].(string)] = s
	}
	var refs []string
	collectRefs(tree, &refs)
	if len(refs) == 0 {
		t.Fatal("no $ref in the document")
	}
	external := 0
	for _, ref := range refs {
		base, frag, _ := strings.Cut(ref, "#")
		target := tree
		if base != "" {
			s, ok := byID[base]
			if !ok {
				t.Errorf("$ref %s: no wire/schema file has $id %s", ref, base)
				continue
			}
			target = s
			external++
		}
		if _, err := jsonPointer(target, frag); err != nil {
			t.Errorf("$ref %s does not resolve: %v", ref, err)
		}
	}
	if external == 0 {
		t.Error("the document reuses none of the wire/schema JSON Schemas")
	}

	security := map[string]string{
		"public":    `[]`,
		"sensitive": `[{"operatorToken":[]},{}]`,
		"change":    `[{"operatorToken":[]}]`,
		"operator":  `[{"operatorToken":[]}]`, // a read for the token alone, even with public reads
	}
	ids := map[string]string{}
	for _, r := range documentedRoutes(t, doc) {
		op := doc.Paths[r.path][strings.ToLower(r.method)]
		if op.OperationID == "" || ids[op.OperationID] != "" {
			t.Errorf("%s: operationId %q missing or also used by %s", r, op.OperationID, ids[op.OperationID])
		}
		ids[op.OperationID] = r.String()
		if len(op.Responses) == 0 {
			t.Errorf("%s: no responses", r)
		}
		got, _ := json.Marshal(op.Security)
		if want, ok := security[op.Auth]; !ok || string(got) != want {
			t.Errorf("%s: x-computeboard-auth %q with security %s", r, op.Auth, got)
		}
		for _, seg := range strings.Split(r.path, "/") {
			if !strings.HasPrefix(seg, "{") {
				continue
			}
			name := strings.Trim(seg, "{}")
			found := false
			for _, p := range op.Parameters {
				if ref, ok := p["$ref"].(string); ok {
					v, err := jsonPointer(tree, strings.TrimPrefix(ref, "#"))
					if err != nil {
						continue
					}
					p = v.(map[string]any)
				}
				found = found || (p["name"] == name && p["in"] == "path" && p["required"] == true)
			}
			if !found {
				t.Errorf("%s: path parameter %s is not declared (required, in: path)", r, name)
			}
		}
	}
}

// TestOpenAPIMatchesRoutes checks, in both directions, that the routes the
// server registers and the OpenAPI document agree: every route of
// apiHandler and of the broker's table is documented with the same
// authorization, and, against a running adapter, every documented
// operation is served (neither the router's 404 nor 405), answers 401
// without the token exactly where the document says the token is needed,
// and every undocumented method on a documented path is 405.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	var doc openAPIDoc
	raw := readRepoJSON(t, "internal/adapter/openapi.json", &doc)
	documented := documentedRoutes(t, doc)

	// The source's route tables against the document.
	registered := registeredRoutes(t)
	for _, r := range registered {
		i := slices.IndexFunc(documented, func(d route) bool { return d.method == r.method && d.path == r.path })
		switch {
		case i < 0:
			t.Errorf("route %s (%s) is registered but not in internal/adapter/openapi.json", r, r.auth)
		case documented[i].auth != r.auth:
			t.Errorf("route %s: the handler is %s, the document says x-computeboard-auth %s", r, r.auth, documented[i].auth)
		}
	}
	for _, d := range documented {
		if !slices.ContainsFunc(registered, func(r route) bool { return d.method == r.method && d.path == r.path }) {
			t.Errorf("%s is documented but no route table registers it", d)
		}
	}

	// The real server.
	srv := redistest.Shared(t)
	rdb, board := redistest.New(t)
	st := storeFor(t, rdb, board)
	const token = "openapi-s3cret"
	cfg := writeConfig(t, testConfig(board, "operator_token: "+token+"\n"))
	_, out := runAdapter(t, "--config", cfg, "--redis", srv.URL(), "--listen", "127.0.0.1:0", "--fake-nodes", "1")
	api := apiURL(t, out)
	waitScheduler(t, api)
	reqID := postData(t, st, "planner", `{"template":"hello"}`, nil)
	jobID := wire.JobID(reqID)
	waitStatus(t, st, reqID, wire.JobSucceeded)

	do := func(method, path string, auth bool) (int, http.Header, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, api+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, body
	}
	concrete := func(path string) string {
		return strings.NewReplacer(
			"/jobs/{id}", "/jobs/"+jobID,
			"/items/{id}", "/items/0123456789abcdef0123456789abcdef", // valid, not held: the handler's own 404
			"/dlq/{id}", "/dlq/1-0",
		).Replace(path)
	}
	// routerMiss tells the muxes' own 404 (text, or the broker's
	// catch-all "no such endpoint") from a handler's JSON not_found.
	routerMiss := func(code int, h http.Header, body []byte) bool {
		if code == http.StatusMethodNotAllowed {
			return true
		}
		if code != http.StatusNotFound {
			return false
		}
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		return !strings.HasPrefix(h.Get("Content-Type"), "application/json") || json.Unmarshal(body, &e) != nil ||
			e.Error.Code != "not_found" || strings.HasPrefix(e.Error.Message, "no such endpoint")
	}
	for _, d := range documented {
		path := concrete(d.path)
		code, h, body := do(d.method, path, true)
		if routerMiss(code, h, body) || code >= 500 {
			t.Errorf("%s (as %s %s) with the token: %d %s", d, d.method, path, code, body)
		}
		code, _, body = do(d.method, path, false)
		if needs := d.auth != "public"; needs != (code == http.StatusUnauthorized) {
			t.Errorf("%s (%s) without the token: %d %s", d, d.auth, code, body)
		}
	}
	for path, item := range doc.Paths {
		for _, m := range []string{"GET", "POST", "PUT", "DELETE", "PATCH"} {
			if _, ok := item[strings.ToLower(m)]; ok {
				continue
			}
			if code, _, body := do(m, concrete(path), true); code != http.StatusMethodNotAllowed {
				t.Errorf("undocumented %s %s: %d, want 405: %s", m, path, code, body)
			}
		}
	}

	// The served document is the file.
	code, h, body := do("GET", "/api/v1/openapi.json", false)
	if code != http.StatusOK || h.Get("Content-Type") != "application/json" || string(body) != string(raw) {
		t.Errorf("GET /api/v1/openapi.json: %d, %q, %d bytes; want 200, application/json, the %d bytes of internal/adapter/openapi.json",
			code, h.Get("Content-Type"), len(body), len(raw))
	}
}

// readRepoJSON reads the repository file rel and decodes it into v; it
// returns the bytes.
func readRepoJSON(t *testing.T, rel string, v any) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	return raw
}

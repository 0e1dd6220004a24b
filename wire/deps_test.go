package wire

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestStdlibOnly keeps wire free of non-standard imports: it is the public
// contract, and Python-facing code must not drag the blackboard along. The
// one exception is internal/jsonscan, the JSON scanning primitives shared
// with the broker, which is itself stdlib-only (see its TestStdlibOnly).
func TestStdlibOnly(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		ast, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range ast.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if path == "github.com/computeboard/computeboard/internal/jsonscan" {
				continue
			}
			if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") {
				t.Errorf("%s imports %s; wire may import only the standard library and internal/jsonscan", f, path)
			}
		}
	}
}

package supervise_test

import (
	"go/build"
	"strings"
	"testing"
)

// TestStdlibOnly keeps the supervisor small: package supervise and
// cmd/cb-supervisor may import only the standard library (and cmd/cb-supervisor
// this package), so that a supervisor starts about as fast as /bin/true
// instead of paying for the initialisation of the adapter's dependencies.
func TestStdlibOnly(t *testing.T) {
	for dir, allowed := range map[string]string{
		".":                          "",
		"../../../cmd/cb-supervisor": "github.com/computeboard/computeboard/providers/local/supervise",
	} {
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range pkg.Imports {
			first, _, _ := strings.Cut(imp, "/")
			if strings.Contains(first, ".") && imp != allowed {
				t.Errorf("%s imports %q; it may import only the standard library", pkg.ImportPath, imp)
			}
		}
	}
}

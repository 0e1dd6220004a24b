package engine_test

import (
	"go/build"
	"strings"
	"testing"
)

// TestStdlibOnly keeps the engine pure: package engine may import only the
// standard library (no I/O clients, no loggers, no third-party code).
func TestStdlibOnly(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		first, _, _ := strings.Cut(imp, "/")
		if strings.Contains(first, ".") {
			t.Errorf("engine imports %q; it may import only the standard library", imp)
		}
	}
	// Packages that would let the engine do I/O, read the clock, or share
	// global randomness.
	for _, imp := range pkg.Imports {
		switch imp {
		case "os", "net", "net/http", "log", "log/slog", "io/ioutil", "math/rand", "sync", "syscall", "unsafe":
			t.Errorf("engine imports %q; Schedule must stay a pure function", imp)
		}
	}
}

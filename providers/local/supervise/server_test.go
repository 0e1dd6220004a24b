//go:build linux

package supervise

import "testing"

// TestServeUsage: a server started wrongly says how it is run (exit 2),
// whatever is wrong with its command line.
func TestServeUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"relative/dir"}, {"/tmp", "bogus"}, {"/tmp", "-1s"}, {"/tmp", "1s", "extra"}} {
		if code := Serve(args); code != 2 {
			t.Errorf("Serve(%q) = %d, want 2 (usage)", args, code)
		}
	}
}

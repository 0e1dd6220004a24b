package main

import (
	"strings"
	"testing"

	"github.com/computeboard/computeboard/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// TestRun checks that a small run, saturating and paced, ends with every
// job made and every request acked (run fails otherwise), and a post-only
// run with every request entry and intake message written, and prints its
// line. It asserts nothing about the figures.
func TestRun(t *testing.T) {
	sock := redistest.Shared(t).SocketPath()
	for name, args := range map[string][]string{
		"saturating": {"-clients", "3", "-n", "200"},
		"paced":      {"-clients", "2", "-n", "50", "-rate", "500"},
		"post-only":  {"-clients", "3", "-n", "200", "-post-only"},
	} {
		t.Run(name, func(t *testing.T) {
			var out strings.Builder
			if err := run(t.Context(), append([]string{"-network", "unix", "-redis", sock}, args...), &out); err != nil {
				t.Fatal(err)
			}
			want := []string{"side=computeboard path=post-to-durable-job ", " unacked=0\n"}
			if name == "post-only" {
				want = []string{"side=computeboard path=post-only ", " entries=200\n"}
			}
			for _, want := range want {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output %q lacks %q", out.String(), want)
				}
			}
		})
	}
}

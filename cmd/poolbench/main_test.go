package main

import (
	"strings"
	"testing"

	"github.com/computeboard/computeboard/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// TestRun checks that a small run places every job, through a real agent
// acknowledgement, in both parts, and prints its lines. It asserts
// nothing about the figures.
func TestRun(t *testing.T) {
	sock := redistest.Shared(t).SocketPath()
	var out strings.Builder
	if err := run(t.Context(), []string{"-network", "unix", "-redis", sock, "-nodes", "20", "-n", "300", "-cores", "16", "-rate", "200", "-secs", "1"}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"part=baseline ", "part=throughput nodes=20 n=300 ", "part=latency nodes=20 rate=200 n=200 "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output %q lacks %q", out.String(), want)
		}
	}
}

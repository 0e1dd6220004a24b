//go:build !linux

package supervise

import (
	"fmt"
	"os"
)

// ServeCommand: see server.go (Linux only).
const ServeCommand = "__serve"

// Serve is not available outside Linux: the local provider runs a
// supervisor per task there.
func Serve([]string) int {
	fmt.Fprintln(os.Stderr, "the supervisor server runs on Linux only")
	return 2
}

// StopLine: see server.go (Linux only).
const StopLine = "stop\n"

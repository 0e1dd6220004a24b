// Command cb-supervisor is the local provider's task supervisor: the
// adapter starts one per task, as "cb-supervisor __supervise <task
// directory>" (see providers/local/supervise). It imports nothing outside
// the standard library, so it starts in about the time of /bin/true; the
// adapter finds it next to its own executable, or at local.supervisor.
package main

import (
	"os"

	"github.com/computeboard/computeboard/providers/local/supervise"
)

func main() {
	// The command line is "cb-supervisor __supervise <dir>", the one every
	// supervisor binary gets; this one has no other mode.
	args := os.Args[1:]
	if len(args) > 0 && args[0] == supervise.Command {
		args = args[1:]
	} else {
		args = nil // not started by the provider: Main says how it is run
	}
	os.Exit(supervise.Main(args))
}

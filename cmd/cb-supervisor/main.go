// Command cb-supervisor is the local provider's task supervisor: the
// adapter starts one per work directory, as "cb-supervisor __serve <work
// directory>", a server that supervises every task (supervise.Serve), or,
// with local.supervisor_server off, one per task, as "cb-supervisor
// __supervise <task directory>" (see providers/local/supervise). It imports nothing outside
// the standard library, so it starts in about the time of /bin/true; the
// adapter finds it next to its own executable, or at local.supervisor.
package main

import (
	"os"

	"github.com/computeboard/computeboard/providers/local/supervise"
)

func main() {
	// "cb-supervisor __serve <work dir>" (the work directory's supervisor
	// server) or "cb-supervisor __supervise <task dir>" (one task's).
	if code, ok := supervise.Dispatch(os.Args[1:]); ok {
		os.Exit(code)
	}
	os.Exit(supervise.Main(nil)) // not started by the provider: Main says how it is run
}

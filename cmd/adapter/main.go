// Command adapter is computeboard's service and operator tool: `adapter
// serve` connects the Redis blackboard to the scheduling engine and the
// providers; the other subcommands inspect and steer a running system.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/computeboard/computeboard/internal/adapter"
	"github.com/computeboard/computeboard/providers/local/supervise"
)

func main() {
	// Without cb-supervisor next to it, a local task's supervisor is this
	// binary re-executed (a slower fallback; see supervise.Main); it must
	// not print anything first (its output is the task's).
	if code, ok := supervise.Dispatch(os.Args[1:]); ok {
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := adapter.Main(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

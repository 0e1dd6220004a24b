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
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := adapter.Main(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

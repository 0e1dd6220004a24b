// Package adapter is computeboard's service wiring: it reads flags and
// config, builds the Redis client, the blackboard, the broker, the engine
// loop, the providers and the HTTP API, and runs them until told to stop.
// cmd/adapter is a thin main around Main; integration tests call Main
// in-process, so they drive the real wiring.
package adapter

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// Main runs the adapter command line and returns the process exit code.
func Main(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	err := Run(ctx, args, getenv, stdout, stderr)
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintln(stderr, "adapter:", err)
		fmt.Fprintln(stderr, "run `adapter help` for usage")
		return 2
	default:
		fmt.Fprintln(stderr, "adapter:", err)
		return 1
	}
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

const usage = `adapter — computeboard: a shared compute pool driven through a Redis blackboard

Usage:
  adapter serve [--config FILE] [--redis URL] [--embedded ADDR] [--listen ADDR]
        run the service (without --redis: an embedded in-memory blackboard)
  adapter post [--redis URL] --template NAME [--arg A]... [--priority N] [--wait]
        post a compute.request entry (what a module does with redis-py)
  adapter inbox list|show ID|stats|drop ID|requeue ID|dlq list|dlq replay ID|--all
        inspect and steer a running adapter's inbox (through its HTTP API)
  adapter jobs list|show ID|explain ID [--redis URL]
        read job records and the engine's explanation of a pending job
  adapter top [--api URL] [--interval 1s] [--once]
        a live view of the pool, the jobs, the inbox and the nodes
  adapter sim TRACE [--policy NAME | --compare A,B,...|all] [--json] [--seed N]
        replay a workload trace through the real engine on a virtual clock
  adapter version

Run 'adapter COMMAND --help' for a command's flags.
`

// Run dispatches a subcommand.
func Run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usageError{"no command given"}
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		return runServe(ctx, rest, getenv, stdout, stderr)
	case "post":
		return runPost(ctx, rest, getenv, stdout, stderr)
	case "inbox":
		return runInbox(ctx, rest, getenv, stdout, stderr)
	case "acl":
		return runACL(ctx, rest, getenv, stdout, stderr)
	case "jobs":
		return runJobs(ctx, rest, getenv, stdout, stderr)
	case "top":
		return runTop(ctx, rest, getenv, stdout, stderr)
	case "sim":
		return runSim(ctx, rest, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "computeboard adapter", Version)
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		return usageError{fmt.Sprintf("unknown command %q", cmd)}
	}
}

// Version is the adapter's version, set at link time.
var Version = "dev"

// newLogger returns a text logger at the level named by s.
func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		return nil, usageError{fmt.Sprintf("--log-level %q: want debug, info, warn or error", level)}
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// envOr returns getenv(k) or def.
func envOr(getenv func(string) string, k, def string) string {
	if v := getenv(k); v != "" {
		return v
	}
	return def
}

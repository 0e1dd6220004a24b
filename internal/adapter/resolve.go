package adapter

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/computeboard/computeboard/wire"
)

// Command is what a request resolves to: an argv whose argv[0] came from an
// operator template or the allowlist, never from the request alone, the
// environment the request may add, and the user it runs as.
type Command struct {
	Argv    []string
	Image   string // the template's container image; "" = the provider's default
	Env     map[string]string
	Timeout time.Duration // 0 = none
	User    string        // "" = the adapter's own user
	// RequeueLost: the template lets the job run again when its node is
	// lost with it running (at least once).
	RequeueLost bool
	// NonPreemptible and PreemptMode: the template's eviction settings
	// (scheduler.preemption).
	NonPreemptible bool
	PreemptMode    string
}

// Resolve turns a request into a command, or a structured refusal. It is
// the security boundary: nothing a module writes to Redis runs unless an
// operator approved the program, and a request sets only the environment
// variables the operator listed for that program — never one that changes
// how a program is loaded or interpreted (see deniedEnv).
func (c *Config) Resolve(req wire.Request) (Command, *wire.Error) {
	var cmd Command
	switch {
	case req.Template != "":
		t, ok := c.Templates[req.Template]
		if !ok {
			return cmd, &wire.Error{Code: wire.CodeUnknownTemplate, Field: "template",
				Message: fmt.Sprintf("template %q is not one of the operator's templates (%s)", req.Template, c.templateNames())}
		}
		if len(req.Arguments) > 0 {
			if !t.AllowArguments {
				return cmd, &wire.Error{Code: wire.CodeInvalidValue, Field: "arguments",
					Message: fmt.Sprintf("template %q takes no arguments", req.Template)}
			}
			if len(req.Arguments) > t.MaxArguments {
				return cmd, &wire.Error{Code: wire.CodeInvalidValue, Field: "arguments",
					Message: fmt.Sprintf("template %q takes at most %d arguments, got %d", req.Template, t.MaxArguments, len(req.Arguments))}
			}
			if t.argRE != nil {
				for i, a := range req.Arguments {
					if !t.argRE.MatchString(a) {
						return cmd, &wire.Error{Code: wire.CodeInvalidValue, Field: fmt.Sprintf("arguments[%d]", i),
							Message: fmt.Sprintf("argument %q does not match template %q's pattern %s", a, req.Template, t.ArgumentPattern)}
					}
				}
			}
		}
		if werr := checkRequestEnv(req.Environment, t.EnvAllow, fmt.Sprintf("template %q", req.Template)); werr != nil {
			return cmd, werr
		}
		cmd.Argv = slices.Clone(t.Command)
		if t.EndOfOptions && len(req.Arguments) > 0 {
			cmd.Argv = append(cmd.Argv, "--")
		}
		cmd.Argv = append(cmd.Argv, req.Arguments...)
		cmd.Image = t.Image
		cmd.Env = maps.Clone(t.Env)
		if cmd.Env == nil {
			cmd.Env = map[string]string{}
		}
		maps.Copy(cmd.Env, req.Environment)
		cmd.Timeout = t.Timeout.D()
		cmd.RequeueLost = t.RequeueLost
		cmd.NonPreemptible, cmd.PreemptMode = t.NonPreemptible, t.PreemptMode
		cmd.User = c.userFor(t.RunAs, req.Account)
	case len(req.Command) > 0:
		entry, argv0, ok := c.allowed(req.Command[0])
		if !ok {
			return cmd, &wire.Error{Code: wire.CodeCommandNotAllowed, Field: "command[0]",
				Message: fmt.Sprintf("%q is not on the operator's allowlist %v (a bare name is looked up on the adapter's PATH, a path must name an allowlisted file; relative paths never match)", req.Command[0], c.allowlistPaths())}
		}
		if werr := checkRequestEnv(req.Environment, entry.EnvAllow, fmt.Sprintf("the allowlist entry %s", entry.Path)); werr != nil {
			return cmd, werr
		}
		cmd.Argv = append([]string{argv0}, req.Command[1:]...)
		cmd.Argv = append(cmd.Argv, req.Arguments...)
		cmd.Env = maps.Clone(req.Environment)
		if cmd.Env == nil {
			cmd.Env = map[string]string{}
		}
		cmd.User = c.userFor(entry.RunAs, req.Account)
	default:
		return cmd, &wire.Error{Code: wire.CodeMissingField, Field: "template",
			Message: "a request needs a template or a command"}
	}
	if req.Timeout > 0 {
		rt := time.Duration(req.Timeout * float64(time.Second))
		if cmd.Timeout == 0 || rt < cmd.Timeout {
			cmd.Timeout = rt
		}
	}
	return cmd, nil
}

func (c *Config) templateNames() string {
	names := slices.Sorted(maps.Keys(c.Templates))
	if len(names) == 0 {
		return "none configured"
	}
	return fmt.Sprint(names)
}

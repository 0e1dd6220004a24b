package adapter

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/computeboard/computeboard/wire"
)

// Command is what a request resolves to: an argv whose argv[0] came from an
// operator template or the allowlist, never from the request alone.
type Command struct {
	Argv    []string
	Env     map[string]string
	Timeout time.Duration // 0 = none
}

// Resolve turns a request into a command, or a structured refusal. It is
// the security boundary: nothing a module writes to Redis runs unless an
// operator approved the program.
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
		for _, k := range slices.Sorted(maps.Keys(req.Environment)) {
			if !slices.Contains(t.EnvAllow, k) {
				return cmd, &wire.Error{Code: wire.CodeInvalidValue, Field: "environment." + k,
					Message: fmt.Sprintf("template %q does not let requests set %s (allowed: %v)", req.Template, k, t.EnvAllow)}
			}
		}
		cmd.Argv = append(slices.Clone(t.Command), req.Arguments...)
		cmd.Env = maps.Clone(t.Env)
		if cmd.Env == nil {
			cmd.Env = map[string]string{}
		}
		maps.Copy(cmd.Env, req.Environment)
		cmd.Timeout = t.Timeout.D()
	case len(req.Command) > 0:
		if !c.allowed(req.Command[0]) {
			return cmd, &wire.Error{Code: wire.CodeCommandNotAllowed, Field: "command[0]",
				Message: fmt.Sprintf("%q is not on the operator's allowlist %v", req.Command[0], c.Allowlist)}
		}
		argv0, _ := resolveCommand(req.Command[0])
		cmd.Argv = append([]string{argv0}, req.Command[1:]...)
		cmd.Argv = append(cmd.Argv, req.Arguments...)
		cmd.Env = maps.Clone(req.Environment)
		if cmd.Env == nil {
			cmd.Env = map[string]string{}
		}
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

package adapter

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/computeboard/computeboard/engine"
	"github.com/computeboard/computeboard/wire"
)

const resolveYAML = `
templates:
  hello:
    command: [/bin/sh, -c, 'echo hi']
  echo:
    command: [/bin/echo]
    allow_arguments: true
    argument_pattern: '[a-z]+'
    max_arguments: 2
    env_allow: [GREETING]
    timeout: 10s
allowlist: [/bin/true]
`

func TestResolve(t *testing.T) {
	cfg, err := ParseConfig([]byte(resolveYAML), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		req      wire.Request
		want     Command
		wantCode wire.Code
	}{
		"template": {
			req:  wire.Request{Template: "hello"},
			want: Command{Argv: []string{"/bin/sh", "-c", "echo hi"}, Env: map[string]string{}, Timeout: time.Hour},
		},
		"template with arguments, env and shorter timeout": {
			req:  wire.Request{Template: "echo", Arguments: []string{"a", "b"}, Environment: map[string]string{"GREETING": "x"}, Timeout: 2},
			want: Command{Argv: []string{"/bin/echo", "a", "b"}, Env: map[string]string{"GREETING": "x"}, Timeout: 2 * time.Second},
		},
		"unknown template":           {req: wire.Request{Template: "rm"}, wantCode: wire.CodeUnknownTemplate},
		"arguments not allowed":      {req: wire.Request{Template: "hello", Arguments: []string{"x"}}, wantCode: wire.CodeInvalidValue},
		"argument fails the pattern": {req: wire.Request{Template: "echo", Arguments: []string{"; rm -rf /"}}, wantCode: wire.CodeInvalidValue},
		"too many arguments":         {req: wire.Request{Template: "echo", Arguments: []string{"a", "b", "c"}}, wantCode: wire.CodeInvalidValue},
		"env not allowed":            {req: wire.Request{Template: "echo", Environment: map[string]string{"LD_PRELOAD": "x"}}, wantCode: wire.CodeInvalidValue},
		"allowlisted command": {
			req:  wire.Request{Command: []string{"/bin/true", "x"}},
			want: Command{Argv: []string{"/bin/true", "x"}, Env: map[string]string{}},
		},
		"command off the allowlist": {req: wire.Request{Command: []string{"/bin/rm", "-rf", "/"}}, wantCode: wire.CodeCommandNotAllowed},
		"relative path trick":       {req: wire.Request{Command: []string{"../../bin/rm"}}, wantCode: wire.CodeCommandNotAllowed},
		"neither":                   {req: wire.Request{}, wantCode: wire.CodeMissingField},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, werr := cfg.Resolve(tc.req)
			if tc.wantCode != "" {
				if werr == nil || werr.Code != tc.wantCode {
					t.Fatalf("got error %v, want code %s", werr, tc.wantCode)
				}
				if werr.Message == "" {
					t.Fatal("error without a message")
				}
				return
			}
			if werr != nil {
				t.Fatalf("unexpected error: %v", werr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got)\n%s", diff)
			}
		})
	}
}

func TestParseConfigRejects(t *testing.T) {
	tests := map[string]string{
		"unknown key":      "bogus: 1\n",
		"empty template":   "templates:\n  x:\n    command: []\n",
		"relative command": "templates:\n  x:\n    command: [./run.sh]\n",
		"bad pattern":      "templates:\n  x:\n    command: [/bin/echo]\n    argument_pattern: '('\n",
		"bad duration":     "scheduler:\n  interval: soon\n",
		"negative shares":  "accounts:\n  - name: a\n    shares: -1\n",
		"missing on PATH":  "allowlist: [no-such-program-here]\n",
	}
	for name, body := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseConfig([]byte(body), t.TempDir(), nil); err == nil {
				t.Fatalf("config accepted:\n%s", body)
			}
		})
	}
}

func TestParseConfigDefaults(t *testing.T) {
	cfg, err := ParseConfig(nil, "/srv/cb", func(k string) string {
		if k == "COMPUTEBOARD_OPERATOR_TOKEN" {
			return "s3cret"
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Board != "default" || cfg.OperatorToken != "s3cret" || cfg.WorkDir != "/srv/cb/.run/jobs" || cfg.Scheduler.Interval.D() != 200*time.Millisecond {
		t.Fatalf("defaults not filled: %+v", cfg)
	}
}

func TestAccountsConfig(t *testing.T) {
	cfg, err := ParseConfig([]byte(`
accounts:
  - name: research
    shares: 3
    quota: {cpu_cores: 4, memory_gb: 8, gpus: 1}
  - name: planner
    parent: research
    shares: 1
    guaranteed: {cpu_cores: 0.5}
`), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var quota, guaranteed engine.Resources
	quota[engine.DimCPU], quota[engine.DimMemory], quota[engine.DimGPU] = 4000, 8192, 1
	guaranteed[engine.DimCPU] = 500
	want := []engine.Account{
		{Name: "research", Shares: 3, Quota: quota},
		{Name: "planner", Parent: "research", Shares: 1, Guaranteed: guaranteed},
	}
	if diff := cmp.Diff(want, cfg.engineAccounts()); diff != "" {
		t.Errorf("(-want +got)\n%s", diff)
	}
	if _, err := ParseConfig([]byte("accounts:\n  - name: a\n    quota: {gpus: -1}\n"), t.TempDir(), nil); err == nil {
		t.Error("a negative quota was accepted")
	}
}

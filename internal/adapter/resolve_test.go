package adapter

import (
	"bytes"
	"errors"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"
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
  wc:
    command: [/usr/bin/wc, -c]
    allow_arguments: true
    end_of_options: true
allowlist:
  - /bin/true
  - path: /bin/date
    env_allow: [TZ]
`

func TestResolve(t *testing.T) {
	cfg, err := parseConfigAs([]byte(resolveYAML), t.TempDir(), 1000)
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
		"env not allowed":            {req: wire.Request{Template: "echo", Environment: map[string]string{"OTHER": "x"}}, wantCode: wire.CodeEnvNotAllowed},
		"loader variable":            {req: wire.Request{Template: "echo", Environment: map[string]string{"LD_PRELOAD": "x"}}, wantCode: wire.CodeEnvNotAllowed},
		// The first half of the LD_PRELOAD chain: a raw command passed any
		// environment through, the loader's included.
		"raw command with LD_PRELOAD": {req: wire.Request{Command: []string{"/bin/true"}, Environment: map[string]string{"LD_PRELOAD": "/tmp/x.so"}}, wantCode: wire.CodeEnvNotAllowed},
		"raw command with any env":    {req: wire.Request{Command: []string{"/bin/true"}, Environment: map[string]string{"GREETING": "x"}}, wantCode: wire.CodeEnvNotAllowed},
		"raw command with allowed env": {
			req:  wire.Request{Command: []string{"/bin/date"}, Environment: map[string]string{"TZ": "UTC"}},
			want: Command{Argv: []string{"/bin/date"}, Env: map[string]string{"TZ": "UTC"}},
		},
		"end of options": {
			req:  wire.Request{Template: "wc", Arguments: []string{"--files0-from=/etc/shadow"}},
			want: Command{Argv: []string{"/usr/bin/wc", "-c", "--", "--files0-from=/etc/shadow"}, Env: map[string]string{}, Timeout: time.Hour},
		},
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
		"unknown key":        "bogus: 1\n",
		"empty template":     "templates:\n  x:\n    command: []\n",
		"relative command":   "templates:\n  x:\n    command: [./run.sh]\n",
		"bad pattern":        "templates:\n  x:\n    command: [/bin/echo]\n    argument_pattern: '('\n",
		"bad duration":       "scheduler:\n  interval: soon\n",
		"negative shares":    "accounts:\n  - name: a\n    shares: -1\n",
		"missing on PATH":    "allowlist: [no-such-program-here]\n",
		"profiles, no token": "http:\n  profiling: true\n",
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

// parseConfigAs parses a config as if the adapter ran as euid.
func parseConfigAs(b []byte, dir string, euid int) (*Config, error) {
	var cfg Config
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	cfg.dir, cfg.euid = dir, euid
	if err := cfg.fill(nil); err != nil {
		return nil, err
	}
	return &cfg, nil
}

func TestEnvAllowNeverListsLoaderVariables(t *testing.T) {
	for _, name := range []string{"LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH", "PERL5LIB", "RUBYOPT", "NODE_OPTIONS", "BASH_ENV", "ENV", "IFS", "PATH", "GCONV_PATH", "COMPUTEBOARD_PAYLOAD"} {
		for _, body := range []string{
			"templates:\n  x:\n    command: [/bin/true]\n    env_allow: [" + name + "]\n",
			"allowlist:\n  - path: /bin/true\n    env_allow: [" + name + "]\n",
		} {
			_, err := parseConfigAs([]byte(body), t.TempDir(), 1000)
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("env_allow [%s] accepted or error does not name it: %v", name, err)
			}
		}
	}
}

func TestAllowlistMatchesTheSameFile(t *testing.T) {
	cfg, err := parseConfigAs([]byte("allowlist: [/bin/echo]\n"), t.TempDir(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	// A bare name is found on PATH (/usr/bin/echo on a merged-/usr
	// system), which is the allowlisted /bin/echo.
	cmd, werr := cfg.Resolve(wire.Request{Command: []string{"echo", "hi"}})
	if werr != nil {
		t.Fatalf("echo refused though /bin/echo is allowlisted: %v", werr)
	}
	if cmd.Argv[0] != "/bin/echo" {
		t.Errorf("argv[0] = %q, want the allowlisted path /bin/echo", cmd.Argv[0])
	}
	_, werr = cfg.Resolve(wire.Request{Command: []string{"/bin/cat"}})
	if werr == nil || !strings.Contains(werr.Message, "PATH") {
		t.Errorf("refusal does not say how names are matched: %v", werr)
	}
}

func TestRunAs(t *testing.T) {
	const yml = `
templates:
  t: {command: [/bin/true]}
  own: {command: [/bin/true], run_as: daemon}
accounts:
  - {name: research, run_as: bin}
`
	asRoot, err := parseConfigAs([]byte(yml), t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tmpl, account, want string
	}{{"t", "vision", "nobody"}, {"t", "research", "bin"}, {"own", "research", "daemon"}} {
		cmd, werr := asRoot.Resolve(wire.Request{Template: tc.tmpl, Account: tc.account})
		if werr != nil || cmd.User != tc.want {
			t.Errorf("template %s account %s: user %q (%v), want %q", tc.tmpl, tc.account, cmd.User, werr, tc.want)
		}
	}
	if _, err := parseConfigAs([]byte("run_as: root\n"), t.TempDir(), 0); err == nil || !strings.Contains(err.Error(), "allow_root") {
		t.Errorf("run_as root without allow_root: %v", err)
	}
	if _, err := parseConfigAs([]byte("templates:\n  t: {command: [/bin/true], run_as: '0'}\n"), t.TempDir(), 0); err == nil {
		t.Error("a template running as uid 0 was accepted")
	}
	if _, err := parseConfigAs([]byte("run_as: root\nallow_root: true\n"), t.TempDir(), 0); err != nil {
		t.Errorf("explicit root refused: %v", err)
	}
	if _, err := parseConfigAs([]byte("run_as: nobody\n"), t.TempDir(), 1000); err == nil {
		t.Error("a non-root adapter accepted running jobs as another user")
	}
	asUser, err := parseConfigAs([]byte(yml[:strings.Index(yml, "  own")]), t.TempDir(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if cmd, _ := asUser.Resolve(wire.Request{Template: "t"}); cmd.User != "" {
		t.Errorf("non-root adapter: user %q, want its own (\"\")", cmd.User)
	}
}

func TestMayBill(t *testing.T) {
	cfg, err := parseConfigAs([]byte("accounts:\n  - {name: research, modules: [planner]}\n"), t.TempDir(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		module, account string
		want            bool
	}{{"vision", "vision", true}, {"planner", "research", true}, {"vision", "research", false}, {"vision", "planner", false}} {
		if got := cfg.MayBill(tc.module, tc.account); got != tc.want {
			t.Errorf("MayBill(%s, %s) = %v, want %v", tc.module, tc.account, got, tc.want)
		}
	}
}

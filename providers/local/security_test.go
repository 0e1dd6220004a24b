package local

import (
	"errors"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/providers/local/supervise"
	"github.com/computeboard/computeboard/providers/providertest"
	"github.com/google/go-cmp/cmp"
)

// needRoot skips a test that checks privilege separation, which only a
// root provider can do (CI runs as root).
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: only a provider running as root can run tasks as another user")
	}
}

// bothModes runs f against a supervised and an in-process provider.
func bothModes(t *testing.T, f func(t *testing.T, newP func(t *testing.T, cfg Config) *Provider)) {
	t.Run("supervised", func(t *testing.T) { t.Parallel(); f(t, newTestProvider) })
	t.Run("in-process", func(t *testing.T) { t.Parallel(); f(t, newDirectProvider) })
}

// TestTaskRunsUnprivileged: a root provider runs tasks as the task user,
// never as itself.
func TestTaskRunsUnprivileged(t *testing.T) {
	needRoot(t)
	t.Parallel()
	bothModes(t, func(t *testing.T, newP func(*testing.T, Config) *Provider) {
		p := newP(t, Config{})
		st := providertest.WaitDone(t, p, providertest.Start(t, p, helperTask(t, "ids")))
		if got, want := readFile(t, st.StdoutPath), "uid 65534 euid 65534 gid 65534 egid 65534 groups [65534]"; st.State != providers.StateSucceeded || got != want {
			t.Errorf("state %s, ids %q; want succeeded, %q (stderr %q)", st.State, got, want, readFile(t, st.StderrPath))
		}
	})
}

// TestJobCannotReadAdapterEnviron: the adapter's environment holds the
// operator token; a job must not read it from /proc/<adapter pid>/environ.
func TestJobCannotReadAdapterEnviron(t *testing.T) {
	needRoot(t)
	t.Parallel()
	self := "/proc/" + strconv.Itoa(os.Getpid()) + "/environ"
	if b, err := os.ReadFile(self); err != nil || len(b) == 0 {
		t.Fatalf("%s: %d bytes, %v; the test needs something to protect", self, len(b), err)
	}
	bothModes(t, func(t *testing.T, newP func(*testing.T, Config) *Provider) {
		p := newP(t, Config{})
		st := providertest.WaitDone(t, p, providertest.Start(t, p, helperTask(t, "cat", self)))
		if got := readFile(t, st.StdoutPath); st.State != providers.StateFailed || got != "" {
			t.Errorf("job reading %s: state %s, read %d bytes; want failed, nothing read", self, st.State, len(got))
		}
	})
}

// TestHomeIsTheTaskDir: HOME is the task's own directory, never the
// adapter's, even when the base environment names one.
func TestHomeIsTheTaskDir(t *testing.T) {
	t.Parallel()
	bothModes(t, func(t *testing.T, newP func(*testing.T, Config) *Provider) {
		dir := workDir(t)
		p := newP(t, Config{WorkDir: dir, Env: map[string]string{"HOME": "/root", "USER": "root"}})
		task := helperTask(t, "env", "HOME")
		st := providertest.WaitDone(t, p, providertest.Start(t, p, task))
		if got, want := readFile(t, st.StdoutPath), filepath.Join(dir, task.ID, "work"); got != want {
			t.Errorf("HOME = %q, want %q", got, want)
		}
	})
}

// fakeToken plays the operator token in the adapter's environment.
const fakeToken = "COMPUTEBOARD_TEST_OPERATOR_TOKEN"

// TestAdapterEnvironmentNotInherited: nothing of the provider process's own
// environment reaches a task, in either mode. Not parallel: it sets our
// environment.
func TestAdapterEnvironmentNotInherited(t *testing.T) {
	t.Setenv(fakeToken, "s3cret")
	for name, newP := range map[string]func(*testing.T, Config) *Provider{
		"supervised": newTestProvider,
		"in-process": newDirectProvider,
	} {
		t.Run(name, func(t *testing.T) {
			p := newP(t, Config{})
			st := providertest.WaitDone(t, p, providertest.Start(t, p, helperTask(t, "env", fakeToken)))
			if got := readFile(t, st.StdoutPath); st.State != providers.StateSucceeded || got != "" {
				t.Errorf("state %s, $%s = %q; want succeeded, empty", st.State, fakeToken, got)
			}
		})
	}
}

// TestUserRules: who a task runs as, and which users a provider refuses.
func TestUserRules(t *testing.T) {
	needRoot(t)
	t.Parallel()
	other := "daemon" // a second unprivileged user, as Task.User
	u, err := user.Lookup(other)
	if err != nil {
		t.Skipf("no user %q on this system: %v", other, err)
	}
	tests := map[string]struct {
		cfg      Config // User "" means none (newTestProvider's default is bypassed with AllowRoot or set)
		taskUser string
		wantErr  error  // from Start
		wantUID  string // the task's uid otherwise
	}{
		"no user, root refused":        {cfg: Config{User: ""}, wantErr: errRoot},
		"named root refused":           {cfg: Config{User: testUser}, taskUser: "root", wantErr: errRoot},
		"uid 0 refused":                {cfg: Config{User: testUser}, taskUser: "0", wantErr: errRoot},
		"root allowed":                 {cfg: Config{AllowRoot: true}, wantUID: "0"},
		"named root allowed":           {cfg: Config{User: testUser, AllowRoot: true}, taskUser: "root", wantUID: "0"},
		"config default":               {cfg: Config{User: testUser}, wantUID: "65534"},
		"task user over config":        {cfg: Config{User: testUser}, taskUser: other, wantUID: u.Uid},
		"numeric uid":                  {cfg: Config{User: testUser}, taskUser: u.Uid, wantUID: u.Uid},
		"unknown user":                 {cfg: Config{User: testUser}, taskUser: "no-such-user-cb", wantErr: providers.ErrInvalidTask},
		"unknown uid":                  {cfg: Config{User: testUser}, taskUser: "4000000000", wantErr: providers.ErrInvalidTask},
		"root refusal is invalid task": {cfg: Config{}, wantErr: providers.ErrInvalidTask},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			bothModes(t, func(t *testing.T, newP func(*testing.T, Config) *Provider) {
				cfg := tc.cfg
				if cfg.User == "" && !cfg.AllowRoot {
					// newTestProvider would default to testUser: go round it.
					cfg.WorkDir = workDir(t)
					cfg.SupervisorPath = testBinary(t)
					if name := t.Name(); filepath.Base(name) == "in-process" {
						cfg.SupervisorPath = ""
					}
					p, err := New(cfg)
					if err != nil {
						t.Fatal(err)
					}
					task := helperTask(t, "ids")
					if _, err := p.Start(t.Context(), task); !errors.Is(err, tc.wantErr) {
						t.Fatalf("Start: %v, want %v", err, tc.wantErr)
					}
					if _, err := os.Stat(filepath.Join(cfg.WorkDir, task.ID)); !errors.Is(err, fs.ErrNotExist) {
						t.Errorf("refused task left a directory: %v", err)
					}
					return
				}
				p := newP(t, cfg)
				task := helperTask(t, "ids")
				task.User = tc.taskUser
				h, err := p.Start(t.Context(), task)
				if tc.wantErr != nil {
					if !errors.Is(err, tc.wantErr) {
						t.Fatalf("Start: %v, want %v", err, tc.wantErr)
					}
					t.Logf("Start: %v", err)
					return
				}
				if err != nil {
					t.Fatalf("Start: %v", err)
				}
				st := providertest.WaitDone(t, p, h)
				out := readFile(t, st.StdoutPath)
				if want := "uid " + tc.wantUID + " euid " + tc.wantUID + " "; st.State != providers.StateSucceeded || len(out) < len(want) || out[:len(want)] != want {
					t.Errorf("state %s, ids %q; want succeeded, starting %q (stderr %q)", st.State, out, want, readFile(t, st.StderrPath))
				}
			})
		})
	}
}

// TestTaskDirectoryPermissions: the task owns its work directory and
// payload; the provider owns everything it reads back (records, output),
// so a job can neither read other users' task files nor swap the
// provider's for links.
func TestTaskDirectoryPermissions(t *testing.T) {
	needRoot(t)
	t.Parallel()
	bothModes(t, func(t *testing.T, newP func(*testing.T, Config) *Provider) {
		dir := workDir(t)
		p := newP(t, Config{WorkDir: dir})
		task := helperTask(t, "exit", "0")
		task.Payload = []byte("secret payload")
		providertest.WaitDone(t, p, providertest.Start(t, p, task))
		taskDir := filepath.Join(dir, task.ID)
		type perm struct {
			Mode     fs.FileMode
			UID, GID uint32
		}
		got := map[string]perm{}
		for _, f := range []string{"", supervise.FileWork, supervise.FilePayload, supervise.FileStdout, supervise.FileStderr, supervise.FileState, supervise.FileExit} {
			fi, err := os.Lstat(filepath.Join(taskDir, f))
			if err != nil {
				t.Fatal(err)
			}
			st := fi.Sys().(*syscall.Stat_t)
			got[f] = perm{fi.Mode(), st.Uid, st.Gid}
		}
		root := func(m fs.FileMode) perm { return perm{m, 0, 0} }
		owned := func(m fs.FileMode) perm { return perm{m, 65534, 65534} }
		want := map[string]perm{
			"":                    root(fs.ModeDir | 0o711),
			supervise.FileWork:    owned(fs.ModeDir | 0o700),
			supervise.FilePayload: owned(0o600),
			supervise.FileStdout:  root(0o600),
			supervise.FileStderr:  root(0o600),
			supervise.FileState:   root(0o600),
			supervise.FileExit:    root(0o600),
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("task directory (-want +got):\n%s", diff)
		}
	})
}

// TestJobCannotTouchProviderFiles: a job cannot replace the files the
// provider reads back, nor read another user's task.
func TestJobCannotTouchProviderFiles(t *testing.T) {
	needRoot(t)
	t.Parallel()
	other := "daemon"
	if _, err := user.Lookup(other); err != nil {
		t.Skipf("no user %q on this system: %v", other, err)
	}
	dir := workDir(t)
	p := newTestProvider(t, Config{WorkDir: dir})
	first := helperTask(t, "exit", "0")
	first.Payload = []byte("first task's payload")
	providertest.WaitDone(t, p, providertest.Start(t, p, first))
	firstDir := filepath.Join(dir, first.ID)

	tests := map[string]struct {
		user string
		args []string
	}{
		"replace own stdout": {args: []string{"rename", "x", "../" + supervise.FileStdout}}, // the working directory is work/
		"write own records":  {args: []string{"create", "../" + supervise.FileExit}},
		"read other payload": {user: other, args: []string{"cat", filepath.Join(firstDir, supervise.FilePayload)}},
		"read other stdout":  {user: other, args: []string{"cat", filepath.Join(firstDir, supervise.FileStdout)}},
		"list other work":    {user: other, args: []string{"ls", filepath.Join(firstDir, supervise.FileWork)}},
		"list the work dir":  {user: other, args: []string{"ls", dir}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			task := helperTask(t, tc.args...)
			task.User = tc.user
			st := providertest.WaitDone(t, p, providertest.Start(t, p, task))
			if st.State != providers.StateFailed || st.ExitCode == nil || *st.ExitCode != 1 {
				t.Errorf("status %+v, want failed with exit code 1 (the helper's \"permission denied\"); stdout %q, stderr %q", st, readFile(t, st.StdoutPath), readFile(t, st.StderrPath))
			}
		})
	}
}

// TestUserRulesNotRoot: a provider not running as root runs tasks as its
// own user only.
func TestUserRulesNotRoot(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("runs as a user other than root (its root twin is TestUserRules)")
	}
	t.Parallel()
	self, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	other := "root"
	if self.Uid == "0" {
		other = "daemon"
	}
	bothModes(t, func(t *testing.T, newP func(*testing.T, Config) *Provider) {
		p := newP(t, Config{AllowRoot: true})
		for _, name := range []string{other, "no-such-user-cb"} {
			task := helperTask(t, "ids")
			task.User = name
			if _, err := p.Start(t.Context(), task); !errors.Is(err, providers.ErrInvalidTask) {
				t.Errorf("Start as %q: %v, want ErrInvalidTask", name, err)
			}
		}
		for _, name := range []string{"", self.Username, self.Uid} {
			task := helperTask(t, "ids")
			task.User = name
			st := providertest.WaitDone(t, p, providertest.Start(t, p, task))
			if out, want := readFile(t, st.StdoutPath), "uid "+self.Uid+" "; st.State != providers.StateSucceeded || len(out) < len(want) || out[:len(want)] != want {
				t.Errorf("as %q: state %s, ids %q; want succeeded, starting %q", name, st.State, out, want)
			}
		}
	})
}

// TestWorkDirOutOfReach: a root provider whose WorkDir a task user cannot
// reach says which directory is in the way, and starts nothing.
func TestWorkDirOutOfReach(t *testing.T) {
	needRoot(t)
	t.Parallel()
	private := t.TempDir() // and its parent: 0700, root's
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(private, "jobs")
	bothModes(t, func(t *testing.T, newP func(*testing.T, Config) *Provider) {
		p := newP(t, Config{WorkDir: filepath.Join(dir, filepath.Base(t.Name()))})
		_, err := p.Start(t.Context(), helperTask(t, "exit", "0"))
		if err == nil || !strings.Contains(err.Error(), "cannot reach") {
			t.Fatalf("Start: %v, want an error saying the work dir is out of reach", err)
		}
		t.Logf("Start: %v", err)
	})
}

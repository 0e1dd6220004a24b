package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/computeboard/computeboard/internal/clock"
	"github.com/computeboard/computeboard/internal/ttlcache"
	"github.com/computeboard/computeboard/pool"
	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/providers/fake"
	"github.com/computeboard/computeboard/wire"
)

// writeCheckpoint writes checkpoint seq of a job as the protocol says:
// files, then the manifest, in a temp dir renamed into place.
func writeCheckpoint(t *testing.T, dir string, seq int64, files map[string]string) string {
	t.Helper()
	tmp := filepath.Join(dir, ".tmp-"+strconv.FormatInt(seq, 10))
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	m := Manifest{Seq: seq}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(tmp, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(body))
		m.Files = append(m.Files, ManifestFile{Path: name, Size: int64(len(body)), SHA256: hex.EncodeToString(sum[:])})
	}
	b, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(tmp, ManifestName), b, 0o644); err != nil {
		t.Fatal(err)
	}
	final := filepath.Join(dir, strconv.FormatInt(seq, 10))
	if err := os.Rename(tmp, final); err != nil {
		t.Fatal(err)
	}
	return final
}

// TestVerifyCheckpoint: a checkpoint verifies only with its manifest and
// every listed file at its size and sum.
func TestVerifyCheckpoint(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		spoil   func(dir string) error
		wantErr string // "" = verifies
	}{
		"good": {spoil: func(string) error { return nil }},
		"wrong size": {spoil: func(d string) error {
			return os.WriteFile(filepath.Join(d, "state.json"), []byte(`{"count": 410}`), 0o644)
		}, wantErr: "size"},
		"wrong sum": {spoil: func(d string) error { // same size, one byte flipped
			return os.WriteFile(filepath.Join(d, "state.json"), []byte(`{"count": 42!`), 0o644)
		}, wantErr: "sha256"},
		"missing manifest": {spoil: func(d string) error { return os.Remove(filepath.Join(d, ManifestName)) }, wantErr: "manifest missing"},
		"missing file":     {spoil: func(d string) error { return os.Remove(filepath.Join(d, "model.bin")) }, wantErr: "model.bin"},
		"symlink": {spoil: func(d string) error {
			if err := os.Remove(filepath.Join(d, "model.bin")); err != nil {
				return err
			}
			return os.Symlink("/etc/hostname", filepath.Join(d, "model.bin"))
		}, wantErr: "symbolic link"},
		"path escapes": {spoil: func(d string) error {
			b, _ := json.Marshal(Manifest{Seq: 1, Files: []ManifestFile{{Path: "../x", Size: 1}}})
			return os.WriteFile(filepath.Join(d, ManifestName), b, 0o644)
		}, wantErr: "bad path"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := writeCheckpoint(t, t.TempDir(), 1, map[string]string{"state.json": `{"count": 42}`, "model.bin": "weights"})
			if err := tc.spoil(d); err != nil {
				t.Fatal(err)
			}
			_, err := VerifyCheckpoint(d)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want one naming %q", err, tc.wantErr)
			}
		})
	}
}

// TestLatestCheckpoint: the newest good checkpoint wins; a newer bad one
// is refused and reported; a temp dir being written is ignored.
func TestLatestCheckpoint(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := time.Unix(1_900_000_000, 0)
	if cp, refused := LatestCheckpoint(filepath.Join(dir, "none"), now); cp != nil || refused != nil {
		t.Fatalf("no directory: %+v, %+v", cp, refused)
	}
	writeCheckpoint(t, dir, 1, map[string]string{"state.json": "1"})
	good := writeCheckpoint(t, dir, 2, map[string]string{"state.json": "2"})
	bad := writeCheckpoint(t, dir, 10, map[string]string{"state.json": "10"}) // 10 > 2: numeric order
	if err := os.WriteFile(filepath.Join(bad, "state.json"), []byte("1O"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A checkpoint being written: files, no manifest, not renamed yet.
	if err := os.MkdirAll(filepath.Join(dir, ".tmp-11"), 0o755); err != nil {
		t.Fatal(err)
	}
	cp, refused := LatestCheckpoint(dir, now)
	if cp == nil || cp.Seq != 2 || cp.Path != good || cp.Reason != "" || cp.At == 0 {
		t.Errorf("checkpoint %+v, want seq 2 at %s", cp, good)
	}
	if len(refused) != 1 || refused[0].Seq != 10 || refused[0].Path != bad || !strings.Contains(refused[0].Reason, "sha256") ||
		refused[0].At != float64(now.Unix()) {
		t.Errorf("refused %+v, want seq 10 (sha256)", refused)
	}
	if err := os.RemoveAll(good); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "1", ManifestName)); err != nil {
		t.Fatal(err)
	}
	if cp, refused := LatestCheckpoint(dir, now); cp != nil || len(refused) != 2 || refused[1].Reason != "manifest missing" {
		t.Errorf("no good checkpoint left: got %+v, refused %+v", cp, refused)
	}
}

// TestRecordCheckpointsWhileRunning: the agent records a running job's
// newest verified checkpoint on its record, and a newer refused one as
// checkpoint_refused (keeping the good one); on an eviction it verifies
// again and the record keeps the checkpoint for the next attempt.
func TestRecordCheckpointsWhileRunning(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.queued(job30s)
	e.assign(j.JobID, "n1")
	a := e.agent(nil, nil)
	root := t.TempDir()
	a.cfg.CheckpointDir = root
	e.run(a)
	e.waitRunning(j.JobID)
	dir := filepath.Join(root, j.JobID)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("the job's checkpoint directory: %v", err)
	}

	writeCheckpoint(t, dir, 1, map[string]string{"state.json": "1"})
	a.recordCheckpoints(e.ctx)
	if rec := e.rec(j.JobID); rec.Checkpoint == nil || rec.Checkpoint.Seq != 1 || rec.CheckpointRefused != nil {
		t.Fatalf("after checkpoint 1: %+v, refused %+v", rec.Checkpoint, rec.CheckpointRefused)
	}
	bad := writeCheckpoint(t, dir, 2, map[string]string{"state.json": "2"})
	if err := os.Remove(filepath.Join(bad, ManifestName)); err != nil {
		t.Fatal(err)
	}
	a.recordCheckpoints(e.ctx)
	rec := e.rec(j.JobID)
	if rec.Checkpoint == nil || rec.Checkpoint.Seq != 1 || rec.CheckpointRefused == nil || rec.CheckpointRefused.Seq != 2 ||
		rec.CheckpointRefused.Reason != "manifest missing" {
		t.Fatalf("after a partial checkpoint 2: %+v, refused %+v; want 1 kept, 2 refused", rec.Checkpoint, rec.CheckpointRefused)
	}

	if err := e.ch.Evict(e.ctx, e.fence, "n1", j.JobID, pool.Eviction{Mode: pool.EvictRequeue, Reason: "by crit"}); err != nil {
		t.Fatal(err)
	}
	rec = e.waitStatus(j.JobID, wire.JobQueued)
	if rec.Checkpoint == nil || rec.Checkpoint.Path != filepath.Join(dir, "1") {
		t.Errorf("requeued record's checkpoint %+v, want %s", rec.Checkpoint, filepath.Join(dir, "1"))
	}
}

// filelessProvider is a fake provider whose tasks see none of the agent
// machine's files (providers.FileSharer), keeping the tasks it started.
type filelessProvider struct {
	*fake.Provider
	mu    sync.Mutex
	tasks []providers.Task
}

func (p *filelessProvider) SharesFiles() bool { return false }

func (p *filelessProvider) Start(ctx context.Context, t providers.Task) (providers.Handle, error) {
	p.mu.Lock()
	p.tasks = append(p.tasks, t)
	p.mu.Unlock()
	return p.Provider.Start(ctx, t)
}

// TestNoCheckpointDirWhereTasksSeeNoFiles: a job on a node whose provider's
// tasks see none of the agent machine's files (Kubernetes) gets no
// checkpoint directory, neither made nor named in its environment; on a
// provider that shares them, the same job gets both.
func TestNoCheckpointDirWhereTasksSeeNoFiles(t *testing.T) {
	t.Parallel()
	for _, shares := range []bool{false, true} {
		e := newEnv(t)
		j := e.queued(job30s)
		e.assign(j.JobID, "n1")
		prov := &filelessProvider{Provider: e.prov}
		var a *Agent
		if shares {
			a = e.agent(nil, nil)
		} else {
			a = e.agent(prov, nil)
		}
		root := t.TempDir()
		a.cfg.CheckpointDir = root
		e.run(a)
		e.waitRunning(j.JobID)
		_, err := os.Stat(filepath.Join(root, j.JobID))
		if shares && err != nil {
			t.Errorf("shared files: the job's checkpoint directory: %v", err)
		}
		if !shares {
			if !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("no shared files: the checkpoint directory was made (%v)", err)
			}
			prov.mu.Lock()
			if len(prov.tasks) != 1 || prov.tasks[0].Env[EnvCheckpointDir] != "" || prov.tasks[0].Env[EnvCheckpointInterval] != "" {
				t.Errorf("no shared files: tasks %+v, want one without the checkpoint variables", prov.tasks)
			}
			prov.mu.Unlock()
		}
	}
}

// TestCheckpointDirMade: a job's checkpoint directory is made under a
// root made when missing, kept with what it holds when the job starts
// again, refused when something else has its name, and (as root) given
// to the job's user, looked up once per ownerTTL.
func TestCheckpointDirMade(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	a := &Agent{cfg: Config{CheckpointDir: filepath.Join(t.TempDir(), "missing", "root"), Clock: clk},
		owners: ttlcache.Cache[string, owner]{TTL: ownerTTL}}
	dir, err := a.checkpointDir("job-1", "")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || dir != filepath.Join(a.cfg.CheckpointDir, "job-1") {
		t.Fatalf("checkpoint directory %s: %v", dir, err)
	}
	if fi, err := os.Stat(a.cfg.CheckpointDir); err != nil || fi.Mode().Perm() != 0o711 {
		t.Fatalf("root: %v %v, want mode 0711", fi, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kept"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if again, err := a.checkpointDir("job-1", ""); err != nil || again != dir {
		t.Fatalf("started again: %s %v", again, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "kept")); err != nil {
		t.Fatalf("a job started again lost its checkpoints: %v", err)
	}
	if err := os.WriteFile(filepath.Join(a.cfg.CheckpointDir, "job-2"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := a.checkpointDir("job-2", ""); err == nil {
		t.Fatal("a file named as the job's directory was taken for it")
	}
	if os.Geteuid() != 0 {
		return // the job runs as this user: nothing to hand over
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody: %v", err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil || strconv.Itoa(int(st.Uid)) != nobody.Uid {
		t.Fatalf("owner of %s: uid %d (%v), want nobody's %s", dir, st.Uid, err, nobody.Uid)
	}
	if _, ok := a.owners.Get("nobody", clk.Now()); !ok {
		t.Fatal("the user looked up is not kept")
	}
	clk.Advance(ownerTTL - time.Nanosecond)
	if _, err := a.checkpointDir("job-3", ""); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Nanosecond)
	if _, ok := a.owners.Get("nobody", clk.Now()); ok {
		t.Fatal("within ownerTTL the user was looked up again")
	}
	if _, err := a.checkpointDir("job-4", "nobody"); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.owners.Get("nobody", clk.Now()); !ok {
		t.Fatal("after ownerTTL the user was not looked up again")
	}
	if _, err := a.checkpointDir("job-5", "no-such-user-here"); err == nil {
		t.Fatal("a job's directory given to a user that does not exist")
	}
	if _, ok := a.owners.Get("no-such-user-here", clk.Now()); ok {
		t.Fatal("a failed lookup was kept")
	}
}

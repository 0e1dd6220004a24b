package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/wire"
)

// The job checkpoint protocol (application-level; see README, Preemption).
// Each job has one checkpoint directory, Config.CheckpointDir/<job id>,
// kept across its attempts and nodes (a shared file system lets a job
// resume on another node). The job writes each checkpoint as
//
//	<dir>/.tmp-<seq>/            its files, then MANIFEST.json, last
//	<dir>/<seq>/                 renamed from the temp dir (atomic)
//
// with seq a decimal number that grows with each checkpoint, on SIGUSR1
// (an eviction in checkpoint mode) and every COMPUTEBOARD_CHECKPOINT_INTERVAL
// seconds. MANIFEST.json lists every file with its size and sha256:
//
//	{"seq": 3, "files": [{"path": "state.json", "size": 17, "sha256": "…"}]}
//
// The agent trusts a checkpoint only once it verified it against its
// manifest: when the task ends (an eviction, a retry) it records the
// newest good one on the job record (jobs.Checkpoint), and before the next
// attempt starts (on any node) it verifies the newest again and passes it
// in COMPUTEBOARD_CHECKPOINT_RESTORE. A checkpoint directory that fails
// (no manifest, a file missing, a wrong size or sum) is refused, recorded
// on the record (checkpoint_refused), and the next older one is tried; the
// job starts from scratch when none is good. Names that are not a number
// (the temp dirs of a checkpoint being written) are ignored.

// Environment of a task when the checkpoint protocol is on.
const (
	EnvCheckpointDir      = "COMPUTEBOARD_CHECKPOINT_DIR"
	EnvCheckpointInterval = "COMPUTEBOARD_CHECKPOINT_INTERVAL" // seconds
	EnvCheckpointRestore  = "COMPUTEBOARD_CHECKPOINT_RESTORE"  // absent when there is nothing to restore
)

// ManifestName is the manifest file in each checkpoint directory.
const ManifestName = "MANIFEST.json"

// Manifest is a checkpoint's MANIFEST.json.
type Manifest struct {
	Seq   int64          `json:"seq"`
	Files []ManifestFile `json:"files"`
}

// ManifestFile is one file of a checkpoint, relative to its directory.
type ManifestFile struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// errNoManifest: a checkpoint directory without its manifest (partial).
var errNoManifest = errors.New("manifest missing")

// VerifyCheckpoint checks the checkpoint directory dir against its
// manifest: every listed file is there, inside dir, with its size and
// sha256. It returns the manifest, or why the checkpoint is refused.
func VerifyCheckpoint(dir string) (Manifest, error) {
	var m Manifest
	b, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if errors.Is(err, os.ErrNotExist) {
		return m, errNoManifest
	}
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("manifest unreadable: %w", err)
	}
	if len(m.Files) == 0 {
		return m, errors.New("manifest lists no files")
	}
	for _, f := range m.Files {
		p := filepath.Clean(f.Path)
		if p == "." || filepath.IsAbs(p) || p == ".." || strings.HasPrefix(p, "../") || p == ManifestName {
			return m, fmt.Errorf("manifest: bad path %q", f.Path)
		}
		if err := noLinks(dir, p); err != nil {
			return m, fmt.Errorf("%s: %w", f.Path, err)
		}
		if err := checkFile(filepath.Join(dir, p), f); err != nil {
			return m, fmt.Errorf("%s: %w", f.Path, err)
		}
	}
	return m, nil
}

// noLinks refuses a path under dir with a symbolic link on the way: the
// agent (maybe root) reads only what the job wrote in its directory.
func noLinks(dir, rel string) error {
	p := dir
	for _, c := range strings.Split(rel, string(filepath.Separator)) {
		p = filepath.Join(p, c)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			return errors.New("a symbolic link")
		}
	}
	return nil
}

func checkFile(path string, f ManifestFile) error {
	fh, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0) // a FIFO must not block the agent
	if err != nil {
		return err
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return errors.New("not a regular file")
	}
	if fi.Size() != f.Size {
		return fmt.Errorf("size %d, manifest says %d", fi.Size(), f.Size)
	}
	h := sha256.New()
	if _, err := io.Copy(h, fh); err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); !strings.EqualFold(got, f.SHA256) {
		return errors.New("sha256 differs from the manifest's")
	}
	return nil
}

// LatestCheckpoint scans a job's checkpoint directory, newest first, and
// returns the newest checkpoint that verifies (nil: none) and the newer
// ones refused on the way, newest first. at stamps them.
func LatestCheckpoint(dir string, at time.Time) (*jobs.Checkpoint, []jobs.Checkpoint) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil
	}
	cs := candidates(ents)
	var refused []jobs.Checkpoint
	for _, c := range cs {
		p := filepath.Join(dir, c.name)
		if _, err := VerifyCheckpoint(p); err != nil {
			refused = append(refused, jobs.Checkpoint{Seq: c.seq, Path: p, At: epoch(at), Reason: err.Error()})
			continue
		}
		cp := jobs.Checkpoint{Seq: c.seq, Path: p, At: epoch(modTime(p, at))}
		return &cp, refused
	}
	return nil, refused
}

type candidate struct {
	seq  int64
	name string
}

// candidates are the checkpoint directories among ents, newest first.
func candidates(ents []os.DirEntry) []candidate {
	var cs []candidate
	for _, e := range ents {
		n, err := strconv.ParseInt(e.Name(), 10, 64)
		if err != nil || n < 0 || !e.IsDir() {
			continue // a temp dir being written, or not ours
		}
		cs = append(cs, candidate{n, e.Name()})
	}
	slices.SortFunc(cs, func(a, b candidate) int { return -cmpInt(a.seq, b.seq) })
	return cs
}

// newestSeq is the newest checkpoint's seq in dir, verified or not (-1:
// none).
func newestSeq(dir string) int64 {
	ents, _ := os.ReadDir(dir)
	if cs := candidates(ents); len(cs) > 0 {
		return cs[0].seq
	}
	return -1
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// modTime is when a checkpoint was made: its manifest's modification time.
func modTime(dir string, or time.Time) time.Time {
	if fi, err := os.Stat(filepath.Join(dir, ManifestName)); err == nil {
		return fi.ModTime()
	}
	return or
}

func epoch(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// checkpointDir makes job jobID's checkpoint directory under the
// agent's CheckpointDir, or keeps the one there (a job started again
// restores from it). When the agent runs as root the job runs as another
// user, runAs (a name or a numeric uid; "" = "nobody", as the local
// provider does), who gets the directory. It is on every start's path:
// one mkdir and one chown, the root made only when it is missing and the
// user looked up once per ownerTTL.
func (a *Agent) checkpointDir(jobID, runAs string) (string, error) {
	root := a.cfg.CheckpointDir
	dir := filepath.Join(root, jobID)
	err := os.Mkdir(dir, 0o750)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(root, 0o711); err != nil { // traversable, not listable
			return "", err
		}
		err = os.Mkdir(dir, 0o750)
	}
	if errors.Is(err, fs.ErrExist) {
		if fi, serr := os.Lstat(dir); serr != nil || !fi.IsDir() {
			return "", fmt.Errorf("checkpoint directory %s: not a directory", dir)
		}
		err = nil
	}
	if err != nil {
		return "", err
	}
	if os.Geteuid() != 0 {
		return dir, nil
	}
	if runAs == "" {
		runAs = "nobody"
	}
	o, err := a.owners.Load(runAs, a.cfg.Clock.Now(), func() (owner, error) { return lookupOwner(runAs) })
	if err != nil {
		return "", err
	}
	if err := os.Chown(dir, o.uid, o.gid); err != nil {
		return "", err
	}
	return dir, nil
}

// ownerTTL is how long a job user's uid and gid, looked up for its
// checkpoint directory, serve later starts (as the local provider keeps
// its users: providers/local's accountTTL).
const ownerTTL = 5 * time.Second

// owner is a job user's uid and gid.
type owner struct{ uid, gid int }

// lookupOwner looks user runAs up (a numeric one by id).
func lookupOwner(runAs string) (owner, error) {
	u, err := user.Lookup(runAs)
	if _, nerr := strconv.Atoi(runAs); nerr == nil {
		u, err = user.LookupId(runAs)
	}
	if err != nil {
		return owner{}, err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return owner{uid, gid}, nil
}

// checkpointLoop records, every CheckpointInterval, the newest verified
// checkpoint of each running task on its job record while it runs (the
// scheduler reads it: the work an eviction would lose starts there).
func (a *Agent) checkpointLoop(ctx context.Context) error {
	t := time.NewTicker(a.cfg.CheckpointInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			a.recordCheckpoints(ctx)
		}
	}
}

// recordCheckpoints is one round of checkpointLoop.
func (a *Agent) recordCheckpoints(ctx context.Context) {
	a.mu.Lock()
	ts := make([]*task, 0, len(a.tasks))
	for _, t := range a.tasks {
		if !t.lost && t.stop == "" {
			ts = append(ts, t)
		}
	}
	a.mu.Unlock()
	for _, t := range ts {
		a.mu.Lock()
		known := t.ckSeq
		a.mu.Unlock()
		if newestSeq(filepath.Join(a.cfg.CheckpointDir, t.rec.JobID)) <= known {
			continue // nothing new: checkpoints are hashed once here
		}
		u, good := a.checkpointUpdate(t.rec.JobID, jobs.Update{ExpectNode: t.node})
		seen := int64(-1) // the newest checkpoint looked at, good or refused
		if good != nil {
			seen = good.Seq
		}
		if u.CheckpointRefused != nil {
			seen = max(seen, u.CheckpointRefused.Seq)
		}
		if good != nil && good.Seq <= known {
			u.Checkpoint = nil // recorded already; only the refusal is new
		}
		if seen <= known || (u.Checkpoint == nil && u.CheckpointRefused == nil) {
			continue
		}
		u.NoCheckpoint = false // while it runs, the record keeps the last good one it had
		_, err := a.cfg.Jobs.Transition(ctx, t.rec.JobID, wire.JobRunning, wire.JobRunning, u)
		if err != nil {
			a.log.Info("record a checkpoint", "job", t.rec.JobID, "err", err)
			continue
		}
		a.mu.Lock()
		t.ckSeq = seen
		a.mu.Unlock()
	}
}

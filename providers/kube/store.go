package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/computeboard/computeboard/providers"
)

// Files in a task directory, <WorkDir>/<task id>.
const (
	fileRecord  = "task.json"  // written once the Job is created
	fileOutcome = "final.json" // the terminal Status, once seen
)

// record is what the provider keeps of a started task: how to find its
// Job, and the Lister's evidence (the note does not fit in an annotation).
type record struct {
	Provider  string            `json:"provider"`
	TaskID    string            `json:"task_id"`
	Job       string            `json:"job"` // namespace/name
	UID       string            `json:"uid"`
	CreatedAt time.Time         `json:"created_at"`
	Labels    map[string]string `json:"labels,omitempty"`
	Note      json.RawMessage   `json:"note,omitempty"`
}

func (p *Provider) taskDir(id string) string { return filepath.Join(p.workDir, id) }

func (p *Provider) writeRecord(rec record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return providers.WriteFileAtomic(filepath.Join(p.taskDir(rec.TaskID), fileRecord), b)
}

func (p *Provider) readRecord(id string) (*record, error) {
	b, err := os.ReadFile(filepath.Join(p.taskDir(id), fileRecord))
	if err != nil {
		return nil, err
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, err
	}
	if rec.Provider != p.name || rec.TaskID != id {
		return nil, fmt.Errorf("%s: record of another provider or task", id)
	}
	return &rec, nil
}

// keepOutcome records a terminal status in the task's directory, so it
// outlives the Job and stays what Poll reports.
func (p *Provider) keepOutcome(id string, st providers.Status) {
	b, _ := json.Marshal(st)
	if err := providers.WriteFileAtomic(filepath.Join(p.taskDir(id), fileOutcome), b); err != nil {
		p.log.Warn("record outcome", "task", id, "err", err)
	}
}

func (p *Provider) outcome(id string) (providers.Status, bool) {
	b, err := os.ReadFile(filepath.Join(p.taskDir(id), fileOutcome))
	if err != nil {
		return providers.Status{}, false
	}
	var st providers.Status
	if json.Unmarshal(b, &st) != nil || !st.State.Terminal() {
		return providers.Status{}, false
	}
	return st, true
}

// Prune removes the directories of tasks whose end was recorded before
// olderThan, and returns how many it removed; those of running tasks, and
// of tasks whose end has not been seen, stay.
func (p *Provider) Prune(ctx context.Context, olderThan time.Time) (removed int, err error) {
	ents, err := os.ReadDir(p.workDir)
	if err != nil {
		return 0, fmt.Errorf("kube: prune: %w", err)
	}
	for _, e := range ents {
		if ctx.Err() != nil {
			return removed, ctx.Err()
		}
		if !e.IsDir() || !providers.ValidTaskID.MatchString(e.Name()) {
			continue
		}
		st, ok := p.outcome(e.Name())
		if !ok || !st.FinishedAt.Before(olderThan) {
			continue
		}
		if err := os.RemoveAll(p.taskDir(e.Name())); err != nil {
			return removed, fmt.Errorf("kube: prune: %w", err)
		}
		removed++
	}
	return removed, nil
}

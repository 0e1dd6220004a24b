package dispatch

import (
	"time"

	"github.com/computeboard/computeboard/engine"
	"github.com/computeboard/computeboard/jobs"
)

// Job checkpoints as the scheduler sees them. The node agents verify each
// job's checkpoints against their manifests and record the newest good one
// on the job record (jobs.Job.Checkpoint; agent/checkpoint.go). The
// scheduler reads it with the active records (adopt, on each rescan) and
// hands its time to the engine as Running.LastCheckpoint: the work an
// eviction loses starts there (cost-based and hybrid preemption). When a
// node is lost, a job with a verified checkpoint and retries left goes
// back to the queue like a requeue_lost job (nodeLost), to resume from it
// elsewhere; the run time lost with the node is counted here.

// progress is the scheduler's view of its jobs' checkpoints and of the
// work lost with lost nodes. It is per Scheduler (Config.fill makes it);
// guarded by Scheduler.mu.
type progress struct {
	checkpoints map[string]time.Time // job ID → its last verified checkpoint
	// lostWork: run seconds since the last checkpoint (or start) of the
	// jobs that ended or were requeued with a lost node; lostCPU and
	// lostGPU weigh them by the jobs' cores and GPUs.
	lostWork, lostCPU, lostGPU float64
}

func newProgress() *progress { return &progress{checkpoints: map[string]time.Time{}} }

// noteCheckpointsLocked records the verified checkpoints of the active
// records, as their states sts say (s.mu held).
func (s *Scheduler) noteCheckpointsLocked(sts []jobs.State) {
	p := s.progress
	clear(p.checkpoints)
	for _, st := range sts {
		if st.CheckpointAt > 0 {
			p.checkpoints[st.JobID] = epochTime(st.CheckpointAt)
		}
	}
}

// lastCheckpointLocked is when job id last saved verified progress (zero:
// never known to this scheduler; s.mu held).
func (s *Scheduler) lastCheckpointLocked(id string) time.Time { return s.progress.checkpoints[id] }

// countLostLocked counts the work t loses with its node at now (s.mu held).
func (s *Scheduler) countLostLocked(t *tracked, now time.Time) {
	since := t.started
	if c := s.progress.checkpoints[t.id()]; c.After(since) {
		since = c
	}
	if since.IsZero() || !now.After(since) {
		return
	}
	secs := now.Sub(since).Seconds()
	p := s.progress
	p.lostWork += secs
	p.lostCPU += secs * float64(t.request[engine.DimCPU]) / 1000 // millicores
	p.lostGPU += secs * float64(t.request[engine.DimGPU])        // whole GPUs or MIG instances
}

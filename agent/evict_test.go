package agent

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/computeboard/computeboard/pool"
	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/wire"
)

// TestEvictOrder: an eviction order stops the job's task and records what
// its mode says: cancel ends it cancelled with error code preempted and
// the order's reason; requeue puts it back in the queue, and a new order
// for the same node runs it again as its next attempt (not taken for a
// replay of the run this node just ended).
func TestEvictOrder(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{pool.EvictCancel, pool.EvictRequeue} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			j := e.queued(job30s)
			e.assign(j.JobID, "n1")
			a := e.agent(nil, nil)
			e.run(a)
			e.waitRunning(j.JobID)
			reason := "evicted (" + mode + ") by crit"
			if err := e.ch.Evict(e.ctx, e.fence, "n1", j.JobID, pool.Eviction{Mode: mode, Reason: reason}); err != nil {
				t.Fatal(err)
			}
			if mode == pool.EvictCancel {
				rec := e.waitStatus(j.JobID, wire.JobCancelled)
				if rec.Error == nil || rec.Error.Code != "preempted" || rec.Error.Message != reason {
					t.Errorf("error %+v, want preempted: %s", rec.Error, reason)
				}
				e.waitReports(j.JobID+" started running", j.JobID+" ended cancelled")
				return
			}
			rec := e.waitStatus(j.JobID, wire.JobQueued)
			if rec.Attempt != 1 || rec.Error != nil {
				t.Errorf("requeued record: attempt %d, error %+v; want attempt 1, no error", rec.Attempt, rec.Error)
			}
			e.waitReports(j.JobID+" started running", j.JobID+" ended queued")
			e.assign(j.JobID, "n1")
			rec = e.waitRunning(j.JobID)
			if rec.Attempt != 2 {
				t.Errorf("second run's attempt %d, want 2", rec.Attempt)
			}
			e.waitReports(j.JobID+" started running", j.JobID+" ended queued", j.JobID+" started running")
		})
	}
}

// signalProvider is the fake provider with a Signaler that records the
// signals it was asked to deliver.
type signalProvider struct {
	providers.Provider
	mu   sync.Mutex
	sigs []syscall.Signal
}

func (p *signalProvider) Signal(_ context.Context, _ providers.Handle, sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sigs = append(p.sigs, sig)
	return nil
}

func (p *signalProvider) signals() []syscall.Signal {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]syscall.Signal(nil), p.sigs...)
}

// TestEvictCheckpoint: in checkpoint mode the task gets SIGUSR1 and keeps
// running through the grace; then it is stopped and requeued.
func TestEvictCheckpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	prov := &signalProvider{Provider: e.prov}
	j := e.queued(job30s)
	e.assign(j.JobID, "n1")
	a := e.agent(prov, nil)
	e.run(a)
	e.waitRunning(j.JobID)
	if err := e.ch.Evict(e.ctx, e.fence, "n1", j.JobID, pool.Eviction{Mode: pool.EvictCheckpoint, Reason: "by crit", Grace: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("SIGUSR1", func() bool { return len(prov.signals()) == 1 && prov.signals()[0] == syscall.SIGUSR1 })
	time.Sleep(50 * time.Millisecond) // several polls within the grace
	if rec := e.rec(j.JobID); rec.Status != wire.JobRunning {
		t.Fatalf("job %s within the checkpoint grace, want running", rec.Status)
	}
	e.clk.Advance(10 * time.Second)
	e.waitStatus(j.JobID, wire.JobQueued)
	e.waitReports(j.JobID+" started running", j.JobID+" ended queued")
}

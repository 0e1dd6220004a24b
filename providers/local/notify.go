package local

import (
	"errors"
	"os"

	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/providers/local/supervise"
)

// Ended returns the channel on which the provider says, as it happens,
// that a task has ended (providers.Notifier):
//
//   - a task this instance started: when its waiter has the outcome, which
//     it learns from the exit of the task's process (in-process watch) or
//     of its supervisor with the outcome on its status pipe, once the exit
//     record is published;
//   - a task an earlier adapter process started: from the first Poll that
//     finds it running, this instance watches its supervisor (or, without
//     one, its process) through a pidfd on Linux, and says so when that
//     process exits, which a supervisor does after publishing the outcome.
//     Where a pidfd cannot be had (another system, an old kernel), only
//     polls see the end;
//   - any task Stop has stopped.
//
// Notices are kept from the first call on.
func (p *Provider) Ended() <-chan providers.Handle {
	c := p.notices.C()
	p.mu.Lock()
	p.notify = true
	p.mu.Unlock()
	return c
}

// exitWatch watches one process of an adopted task for its exit.
type exitWatch struct {
	f *os.File // a pidfd
}

// close ends the watch without a notice. It is safe on a nil watch.
func (w *exitWatch) close() {
	if w != nil {
		w.f.Close()
	}
}

// watchAdopted starts watching task id, which Poll found running on disk
// (an earlier adapter process started it), unless that is done already,
// nobody listens for notices, or the provider is closed. The process
// watched is the one whose exit changes what Poll reports: the task's
// supervisor while it lives (it exits after recording the outcome), or
// else the task's leader. When it exits a notice is sent, and the next
// Poll that finds the task still running (its leader outlived its
// supervisor) watches again.
func (p *Provider) watchAdopted(id string) {
	p.mu.Lock()
	_, seen := p.adopted[id]
	skip := !p.notify || seen || p.closed || p.tasks[id] != nil
	if !skip {
		p.adopted[id] = nil // claimed: one watch per task
	}
	p.mu.Unlock()
	if skip {
		return
	}
	h := providers.Handle{Provider: p.name, ID: id}
	w, err := p.openWatch(id)
	if errors.Is(err, errProcessGone) {
		// It ended since pollDisk looked: Poll says so now.
		p.unwatch(id, nil)
		p.notices.Send(h)
		return
	}
	if err != nil {
		// The nil entry stays: polls alone see this task's end.
		p.log.Debug("adopted task not watched; polls see its end", "job", id, "err", err)
		return
	}
	p.mu.Lock()
	closed := p.closed
	if !closed {
		p.adopted[id] = w
	}
	p.mu.Unlock()
	if closed {
		w.close()
		return
	}
	go func() { // ends when the process exits or the provider is closed
		if err := waitExit(w.f); err != nil {
			return // closed
		}
		p.unwatch(id, w)
		w.close()
		p.notices.Send(h)
	}()
}

// unwatch forgets task id's watch, if it is still w.
func (p *Provider) unwatch(id string, w *exitWatch) {
	p.mu.Lock()
	if cur, ok := p.adopted[id]; ok && cur == w {
		delete(p.adopted, id)
	}
	p.mu.Unlock()
}

// unwatchEnded drops task id's watch, or the note that it cannot be
// watched, once Poll has found the task ended.
func (p *Provider) unwatchEnded(id string) {
	p.mu.Lock()
	w, ok := p.adopted[id]
	delete(p.adopted, id)
	p.mu.Unlock()
	if ok {
		w.close() // its goroutine ends without a notice
	}
}

// errProcessGone: the process to watch has already exited.
var errProcessGone = errors.New("process gone")

// openWatch opens a pidfd on the adopted task's supervisor, if it is
// alive, or else its leader, and checks after opening it that it is that
// process (same boot, pid and start time), so the pidfd cannot name
// another one.
func (p *Provider) openWatch(id string) (*exitWatch, error) {
	rec, err := supervise.ReadState(p.taskDir(id))
	if err != nil {
		return nil, err
	}
	boot, err := supervise.BootID()
	if err != nil || rec.BootID == "" || boot != rec.BootID {
		return nil, errors.New("process identity cannot be checked")
	}
	for _, proc := range []supervise.ProcIdentity{{PID: rec.SupervisorPID, StartTicks: rec.SupervisorStartTicks, Server: rec.SupervisorServer}, {PID: rec.PID, StartTicks: rec.StartTicks}} {
		// A supervisor server outlives the task: its exit says nothing.
		if proc.PID <= 0 || proc.StartTicks == 0 || proc.Server {
			continue
		}
		f, err := openPidfd(proc.PID)
		if err != nil && !errors.Is(err, errProcessGone) {
			return nil, err
		}
		if err == nil {
			if st, _, ticks, err := supervise.ProcStat(proc.PID); err == nil && !supervise.Dead(st) && ticks == proc.StartTicks {
				return &exitWatch{f: f}, nil
			}
			f.Close()
		}
	}
	return nil, errProcessGone
}

package providers

import (
	"context"
	"encoding/json"
	"sync"
	"syscall"
	"time"
)

// Optional abilities. Each is a small interface the adapter detects with a
// type assertion (if s, ok := p.(providers.Suspender); ok { ... }), so a new
// backend needs only the three Provider methods. Each method returns
// ErrUnknownHandle for a handle the provider does not know and ErrNotRunning
// for a task that has finished or is lost.
//
// Implemented today: Suspender, Signaler and Lister (providers/local),
// Notifier (providers/local and providers/fake).
// Later work (roadmap items 4 and 5): Checkpointer and Restorer; nothing
// implements them yet.

// Lister lists the tasks a provider holds evidence of, with their labels:
// what the adapter reads to reconcile job records that Redis lost (an
// agent that restarted across the loss knows its tasks only from here).
// Tasks lists every task still running, and every task that ended at or
// after since (as far back as the provider keeps records); a task whose
// start was cut short before it ran is not listed.
type Lister interface {
	Tasks(ctx context.Context, since time.Time) ([]TaskRecord, error)
}

// TaskRecord is one task a Lister lists: its handle, the Labels and Note
// it was started with, and its Status as Poll would report it.
type TaskRecord struct {
	Handle Handle
	Labels map[string]string
	Note   json.RawMessage
	Status Status
}

// Suspender pauses a running task in place and resumes it later: the
// "suspend/resume" preemption mode. A suspended task keeps its memory and
// still counts against its node; Timeout keeps running while it is paused.
type Suspender interface {
	Suspend(ctx context.Context, h Handle) error
	Resume(ctx context.Context, h Handle) error
}

// Signaler delivers a signal to every process of a task. It carries the job
// author's checkpoint protocol ("on SIGUSR1, write a checkpoint to the
// checkpoint directory") until Checkpointer exists.
type Signaler interface {
	Signal(ctx context.Context, h Handle, sig syscall.Signal) error
}

// Notifier tells the adapter as soon as a task ends, so that it polls that
// task then instead of polling every task on a short tick.
//
// Ended returns the provider's notice channel, the same one on every call.
// The provider sends on it the Handle of each task it sees reach a terminal
// state, once Poll reports that state (an outcome the provider records is
// on disk first). A notice is a hint, never a report: it carries no status
// (the receiver polls the task), it may come twice or for a task the
// receiver no longer tracks, and it may never come, since a provider never
// blocks to send one (see EndedQueue) and may not see every end (a task an
// earlier adapter process started, say). So a receiver still polls every
// task now and then (the agent: every Config.SafetyPoll, 5 s by default),
// and retries a stop on its own tick until the task is terminal.
//
// A provider keeps notices from the first call of Ended on; before it, it
// drops them (nobody listens).
type Notifier interface {
	Ended() <-chan Handle
}

// EndedQueue is a Notifier's channel, for providers: Send never blocks.
// Notices wait in the channel's buffer (EndedBuffer) and, once it is full,
// in a backlog that one goroutine, alive only while the backlog is not
// empty, hands on; past EndedBacklog waiting notices the newest are
// dropped (the receiver's occasional full poll catches them). Send drops
// every notice until C is first called. The zero value is ready to use;
// an EndedQueue must not be copied after first use.
type EndedQueue struct {
	once sync.Once
	ch   chan Handle

	mu         sync.Mutex
	listening  bool     // C was called; guarded by mu
	backlog    []Handle // guarded by mu
	forwarding bool     // the backlog's goroutine runs; guarded by mu
	dropped    int      // guarded by mu
}

// Sizes of an EndedQueue.
const (
	EndedBuffer  = 1024    // notices in the channel's buffer
	EndedBacklog = 1 << 16 // notices waiting behind a full buffer
)

func (q *EndedQueue) init() { q.once.Do(func() { q.ch = make(chan Handle, EndedBuffer) }) }

// C returns the channel, for Notifier.Ended; from its first call on, Send
// keeps notices.
func (q *EndedQueue) C() <-chan Handle {
	q.init()
	q.mu.Lock()
	q.listening = true
	q.mu.Unlock()
	return q.ch
}

// Send queues a notice that the task h has ended, without blocking.
func (q *EndedQueue) Send(h Handle) {
	q.init()
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.listening {
		return
	}
	if !q.forwarding {
		select {
		case q.ch <- h:
			return
		default: // full: the backlog takes it
		}
	}
	if len(q.backlog) >= EndedBacklog {
		q.dropped++
		return
	}
	q.backlog = append(q.backlog, h)
	if !q.forwarding {
		q.forwarding = true
		go q.forward() // ends when the backlog is empty
	}
}

// Dropped is how many notices Send dropped for want of room.
func (q *EndedQueue) Dropped() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.dropped
}

// forward hands the backlog on, blocking on the channel, until it is empty.
func (q *EndedQueue) forward() {
	for {
		q.mu.Lock()
		if len(q.backlog) == 0 {
			q.backlog, q.forwarding = nil, false
			q.mu.Unlock()
			return
		}
		h := q.backlog[0]
		q.backlog = q.backlog[1:]
		q.mu.Unlock()
		q.ch <- h
	}
}

// Checkpointer takes a checkpoint of a running task and describes where it
// is. Later work: no provider implements it yet.
type Checkpointer interface {
	Checkpoint(ctx context.Context, h Handle) (Checkpoint, error)
}

// Restorer starts a task from a checkpoint instead of from scratch.
// Migration is Checkpoint on one provider (or node) followed by Restore on
// another that can read the checkpoint's Location; a provider must refuse a
// checkpoint it cannot really restore rather than fake it. Later work: no
// provider implements it yet.
type Restorer interface {
	Restore(ctx context.Context, t Task, cp Checkpoint) (Handle, error)
}

// Checkpoint describes one checkpoint, as data the adapter can store.
type Checkpoint struct {
	Provider string    `json:"provider"` // who took it
	TaskID   string    `json:"task_id"`  // the task it was taken from
	Location string    `json:"location"` // URI or path of the checkpoint data
	TakenAt  time.Time `json:"taken_at"`
	// Metadata is the verified metadata the checkpoint protocol records
	// (format, size, checksum, ...).
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Prober is implemented by providers that can check they are able to
// start tasks at all (a writable, non-full work directory, a reachable
// cluster). A node agent whose provider failed several starts in a row
// takes its node out of scheduling and asks Probe before taking work again.
type Prober interface {
	Probe(ctx context.Context) error
}

// FileSharer is implemented by providers that say whether their tasks see
// the files of the machine their agent runs on. The agent gives a task a
// checkpoint directory (the job checkpoint protocol) only where they do:
// elsewhere the path would name nothing the task can reach, and making the
// directory would only slow the start. A provider that does not implement
// it is taken to share them (the local provider; Slurm, whose nodes share
// the checkpoint directory as every node of the pool must).
type FileSharer interface {
	SharesFiles() bool
}

// SharesFiles reports whether p's tasks see the agent machine's files
// (FileSharer; true for a provider that does not say).
func SharesFiles(p Provider) bool {
	fs, ok := p.(FileSharer)
	return !ok || fs.SharesFiles()
}

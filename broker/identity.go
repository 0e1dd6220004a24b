package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/clock"
	"github.com/computeboard/computeboard/wire"
)

// namedElsewhere reports whether the request entry an undecodable message
// names is held in the inbox under another message, or already has a job
// record: then the message is refused as itself and leaves that request
// and its job alone.
func (b *Broker) namedElsewhere(ctx context.Context, d *Delivery) (bool, error) {
	if it, ok := b.inbox.Get(d.EntryID); ok && it.Value.(*Delivery).MessageID != d.MessageID {
		return true, nil
	}
	return b.jobs.Exists(ctx, d.JobID)
}

// withdrawnStatus reads a request entry's own status and reports whether
// it says the poster withdrew the request (retracted or superseded). Only
// the entry's owner can write its status on a board with ACLs; on a
// trusted board anyone can, as anyone could post a retraction event.
func (b *Broker) withdrawnStatus(ctx context.Context, entryID string) (bool, error) {
	if !blackboard.ValidID(entryID) {
		return false, nil
	}
	st, err := b.rdb.HGet(ctx, b.keys.Entry(entryID), "status").Result()
	switch {
	case errors.Is(err, redis.Nil), isWrongType(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read status of %s: %w", entryID, err)
	}
	return st == string(blackboard.StatusRetracted) || st == string(blackboard.StatusSuperseded), nil
}

// retracted handles a retraction event for entryID. The event is a hint:
// nothing is cancelled unless the entry's own status says withdrawn. A
// queued request leaves the inbox and is cancelled; a job that exists (or
// an Accept racing with this, whose record may have just been made) gets
// cancel_requested and Config.OnCancel. acted reports that the entry was
// really withdrawn.
func (b *Broker) retracted(ctx context.Context, entryID string) (acted bool, err error) {
	ok, err := b.withdrawnStatus(ctx, entryID)
	if err != nil || !ok {
		return false, err
	}
	if it, ok := b.inbox.Remove(entryID); ok {
		if err := b.cancelQueued(ctx, it.Value.(*Delivery), "request entry retracted before it started"); err != nil {
			return true, err
		}
		// It may have been handed out, and its record made just now by an
		// Accept that read the status before the retraction: fall through
		// so that record is marked as well.
	}
	return true, b.signalCancel(ctx, entryID)
}

// signalCancel marks the job of a withdrawn request cancel_requested (if
// it has a record that is not terminal) and tells the adapter.
func (b *Broker) signalCancel(ctx context.Context, entryID string) error {
	jobID := wire.JobID(entryID)
	ok, err := b.jobs.MarkCancelRequested(ctx, jobID)
	if err != nil || !ok {
		return err
	}
	if b.cfg.OnCancel != nil {
		b.cfg.OnCancel(Cancel{EntryID: entryID, JobID: jobID})
	}
	return nil
}

// cancelStep re-reads the request entry status of every active job and
// signals the ones whose request was withdrawn (again, each time, until
// the job ends): a retraction written as a plain HSET of the entry's
// status, with no event, or one whose event this broker missed, still
// reaches the adapter. Run calls it every CancelCheckInterval, paced
// (pacedCancel).
func (b *Broker) cancelStep(ctx context.Context) error {
	_, err := b.cancelScan(ctx)
	return err
}

// cancelCheckRate bounds the cancel check's reads: a pass reads two keys
// per active job (inside Redis: jobs.WithdrawnRequests), and with many
// active jobs the next pass waits until its reads average at most this
// many keys a second (10,000 active jobs: a pass every 10 s rather than
// every CancelCheckInterval). The check is the safety net behind the
// retraction events, which cancel within 50 ms (eventsLoop); with 10,000
// pending jobs it was a sixth of an idle adapter's CPU, and 10,000 Redis
// reads a second.
const cancelCheckRate = 2000

// pacedCancel runs scan (cancelScan) when called, unless the reads of the
// last pass, at cancelCheckRate, are not yet paid for.
func pacedCancel(clk clock.Clock, scan func(context.Context) (int, error)) func(context.Context) error {
	var next time.Time
	return func(ctx context.Context) error {
		now := clk.Now()
		if now.Before(next) {
			return nil
		}
		n, err := scan(ctx)
		next = now.Add(time.Duration(2*n) * time.Second / cancelCheckRate)
		return err
	}
}

// cancelScan is cancelStep's pass; it returns how many active jobs it
// looked at. The reads happen inside Redis (jobs.WithdrawnRequests).
func (b *Broker) cancelScan(ctx context.Context) (int, error) {
	ids, n, err := b.jobs.WithdrawnRequests(ctx)
	if err != nil {
		return n, fmt.Errorf("cancel check: %w", err)
	}
	var errs []error
	for _, id := range ids {
		if !blackboard.ValidID(id) {
			continue
		}
		if err := b.signalCancel(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}

package broker

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/luabatch"
	"github.com/computeboard/computeboard/jobs"
)

// The batch API: NextBatch and AcceptBatch do for several requests what
// Next and Accept do for one, with the same guarantees, in a few round
// trips per batch instead of a few per request. An adapter's intake loop
// that calls
//
//	ds, err := b.NextBatch(ctx, 64)
//	for i, r := range b.AcceptBatch(ctx, ds) { … ds[i], r.Job, r.Created, r.Err … }
//
// hands out and accepts what 64 rounds of Next and Accept would, in a few
// round trips instead of a few hundred.

// acceptConcurrency bounds the requests of one AcceptBatch whose
// blackboard steps (job entry, consume) are in flight at once.
const acceptConcurrency = 16

// NextBatch is Next for up to n requests: it blocks until one is ready (or
// ctx is done), then takes those ready at once, at most n, in the order
// successive Next calls would hand them out. Unlike Next it does not
// re-read the request entries' statuses: AcceptBatch (and Accept) read the
// status atomically with creating the job record and finish a retracted,
// superseded or expired request there instead, so a withdrawn request
// still never starts, without a round trip per hand-out. A request whose
// TTL has lapsed is expired here, as in Next. The adapter must then accept
// (Accept or AcceptBatch), release or reject each one within LeaseTimeout.
//
// A request whose expiry fails here goes back to the inbox and is handed
// out later; the error is returned only when nothing could be handed out.
func (b *Broker) NextBatch(ctx context.Context, n int) ([]*Delivery, error) {
	return b.NextBatchAdmitted(ctx, n, nil)
}

// handOffBatch expires the deliveries of ds whose TTL has lapsed (acked in
// the inbox, or on error returned to it) and returns the others, in place.
func (b *Broker) handOffBatch(ctx context.Context, ds []*Delivery) ([]*Delivery, error) {
	now := b.cfg.Clock.Now()
	out := ds[:0]
	var errs []error
	for _, d := range ds {
		if !d.Entry.IsExpired(now) {
			out = append(out, d)
			continue
		}
		if err := b.expire(ctx, d); err != nil {
			_ = b.inbox.Return(d.lease)
			errs = append(errs, fmt.Errorf("%s: %w", d.EntryID, err))
			continue
		}
		_ = b.inbox.Ack(d.lease) // finished here (expired)
	}
	return out, errors.Join(errs...)
}

// AcceptResult is what Accept returns for one delivery of AcceptBatch.
type AcceptResult struct {
	Job     jobs.Job
	Created bool
	Err     error
}

// AcceptBatch is Accept for each of ds, result i for ds[i], with Accept's
// guarantees. The common case — a new request that gets a new job — takes
// one step for the whole batch: one pipeline of intake.lua calls, each of
// which creates the record, posts the job entry (queued), consumes the
// request entry and acknowledges the intake message atomically (the record
// and the entries as jobs.Store.IntakeStep gives them, the ack as ack.lua
// does it), so a crash leaves each request either untouched or finished.
// A request that step cannot finish gets nothing written there and takes
// Accept's three steps (acceptSteps): a duplicate idempotency key (or a
// redelivery whose record exists), a request entry found retracted,
// superseded, expired or not a HASH, a job entry left by an earlier
// refusal.
//
// Requests with the same idempotency key in one batch behave as in
// successive Accepts: the first creates the job, the others get it with
// Created false. A request found retracted, superseded or expired gets no
// job and ends as in Accept: its result has the job in its final status
// (cancelled or expired), Created false, Err nil — the adapter starts only
// results whose job is queued. A failed request has Err set (ErrLeaseLost:
// drop it; jobs.ErrFenced: this scheduler was deposed, nothing was
// written; otherwise its lease lapses and it is handed out again) and does
// not hold up the others.
func (b *Broker) AcceptBatch(ctx context.Context, ds []*Delivery) []AcceptResult {
	res := make([]AcceptResult, len(ds))
	fail := func(i int, err error) {
		res[i] = AcceptResult{Err: fmt.Errorf("broker: accept %s: %w", ds[i].EntryID, err)}
	}
	now := b.cfg.Clock.Now()
	js := make([]jobs.Job, len(ds))
	calls := make([]luabatch.Call, len(ds))
	var group, consumer any = blackboard.InboxGroup, b.cfg.Consumer // boxed once
	for i, d := range ds {
		if _, err := b.inbox.Extend(d.lease); err != nil {
			fail(i, err)
			continue
		}
		// intake.lua's own KEYS and ARGV first, intake_job's after.
		ck := make([]string, 0, 3+jobs.IntakeKeys)
		ck = append(ck, d.stream, b.keys.DLQ(), b.keys.DLQWritten())
		ca := make([]any, 0, 3+jobs.IntakeArgs)
		ca = append(ca, group, consumer, d.MessageID)
		j, ck, ca, err := b.jobs.IntakeStep(ck, ca, acceptSpec(d), now)
		if err != nil {
			fail(i, err)
			continue
		}
		js[i] = j
		calls[i] = luabatch.Call{Keys: ck, Args: ca}
	}
	var rest []int
	for i, cmd := range luabatch.Eval(ctx, b.rdb, scriptIntake, calls) {
		if cmd == nil {
			continue // failed above
		}
		r, err := cmd.Slice()
		if err != nil {
			fail(i, fmt.Errorf("intake: %w", err))
			continue
		}
		ir := b.jobs.ParseIntake(r)
		switch {
		case ir.Err != nil:
			fail(i, ir.Err)
		case !ir.Done:
			rest = append(rest, i)
		default:
			b.store.Posted(ctx, ir.Count, js[i].JobID)
			if ack, _ := r[len(r)-1].(int64); ack < 0 {
				b.log.Info("request taken over by another consumer before it was finished here", "entry_id", ds[i].EntryID)
			}
			res[i] = AcceptResult{Job: js[i], Created: true}
			_ = b.inbox.Ack(ds[i].lease)
			b.m.accepted.Add(1)
		}
	}
	if len(rest) > 0 {
		sub := make([]*Delivery, len(rest))
		for k, i := range rest {
			sub[k] = ds[i]
		}
		for k, r := range b.acceptSteps(ctx, sub) {
			res[rest[k]] = r
		}
	}
	return res
}

// acceptSteps is AcceptBatch for the requests its one step could not
// finish: Accept's three steps, each taken for the whole batch at once —
// the records in one pipeline of accept.lua calls (and one of record reads
// for the keys that already had a job: jobs.Store.AcceptBatch), the job
// entries and consumes concurrently (acceptConcurrency at a time), the
// acks in one pipeline — so a crash anywhere leaves each one where Accept
// would (see Accept).
func (b *Broker) acceptSteps(ctx context.Context, ds []*Delivery) []AcceptResult {
	res := make([]AcceptResult, len(ds))
	fail := func(i int, err error) {
		res[i] = AcceptResult{Err: fmt.Errorf("broker: accept %s: %w", ds[i].EntryID, err)}
	}
	js := make([]jobs.Job, len(ds))

	// Step 1: the job records.
	var live []int
	var specs []jobs.AcceptSpec
	for i, d := range ds {
		if _, err := b.inbox.Extend(d.lease); err != nil {
			fail(i, err)
			continue
		}
		live, specs = append(live, i), append(specs, acceptSpec(d))
	}
	withdrawnSt := map[int]blackboard.Status{}
	for k, r := range b.jobs.AcceptBatch(ctx, specs) {
		i := live[k]
		switch w := withdrawnOf(r); {
		case r.Err != nil:
			fail(i, r.Err)
		case w != nil:
			withdrawnSt[i] = w.status
		default:
			js[i], res[i].Created = r.Job, r.Created
		}
	}

	// Step 2 and the first half of step 3, per request in that order.
	var g errgroup.Group
	g.SetLimit(acceptConcurrency)
	for i, d := range ds {
		if res[i].Err != nil {
			continue
		}
		if st, ok := withdrawnSt[i]; ok {
			// Retracted, superseded or expired while it waited: no job;
			// it ends here (acked), and the result has its final status.
			g.Go(func() error {
				j, err := b.finishWithdrawn(ctx, d, st)
				if err != nil {
					fail(i, err)
					return nil
				}
				res[i].Job = j
				_ = b.inbox.Ack(d.lease)
				return nil
			})
			continue
		}
		g.Go(func() error {
			spec := acceptSpec(d)
			err := b.jobs.PublishAccepted(ctx, spec, js[i])
			if err == nil {
				js[i], err = b.jobs.ConsumeAccepted(ctx, spec, js[i])
			}
			if err != nil {
				fail(i, err)
			}
			return nil
		})
	}
	_ = g.Wait()

	// Step 3's ack.
	var acks []*Delivery
	live = live[:0]
	for i, d := range ds {
		if _, done := withdrawnSt[i]; res[i].Err == nil && !done {
			acks, live = append(acks, d), append(live, i)
		}
	}
	for k, err := range b.ackBatch(ctx, acks) {
		i := live[k]
		if err != nil {
			fail(i, err)
			continue
		}
		res[i].Job = js[i]
		_ = b.inbox.Ack(ds[i].lease)
		b.m.accepted.Add(1)
	}
	return res
}

// ackBatch is ack (without dead letters) for each of ds, in one pipeline.
func (b *Broker) ackBatch(ctx context.Context, ds []*Delivery) []error {
	calls := make([]luabatch.Call, len(ds))
	for i, d := range ds {
		calls[i] = luabatch.Call{Keys: b.ackKeys(d), Args: b.ackArgs(d)}
	}
	errs := make([]error, len(ds))
	for i, cmd := range luabatch.Eval(ctx, b.rdb, scriptAck, calls) {
		n, err := cmd.Int()
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("ack %s: %w", ds[i].MessageID, err)
		case n == -2:
			errs[i] = fmt.Errorf("ack %s: %w", ds[i].MessageID, b.fencedErr())
		case n < 0:
			b.log.Info("request taken over by another consumer before it was finished here", "entry_id", ds[i].EntryID)
		}
	}
	return errs
}

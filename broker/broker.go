package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/wire"
)

// Broker reads compute requests from the intake lanes into its Inbox and
// hands them to the adapter (Next), which accepts (Accept), gives back
// (Release) or refuses (Reject) each one. See doc.go for the guarantees.
//
// Lock order: intakeMu before the inbox's own mutex. intakeMu makes "look
// at the free room, read that many messages, push them" one step, so the
// feed and the reclaimer never read more than the inbox can take.
type Broker struct {
	rdb   redis.UniversalClient
	store *blackboard.Store
	jobs  *jobs.Store // job records: Config.Jobs, or one of New's
	keys  blackboard.Keys
	cfg   Config
	log   *slog.Logger
	inbox *Inbox
	admit *admission
	m     *counters

	intakeMu    sync.Mutex
	lanes       *laneSet                // guarded by intakeMu (replaced, never changed in place): the lanes read
	lanesView   atomic.Pointer[laneSet] // lanes, for readers outside intakeMu (stats)
	nlanes      atomic.Int64            // len(lanes.lanes), for the feed loop's waits
	ownStarted  bool                    // guarded by intakeMu; the first own-pending re-read has begun (lanes found later have none)
	regSeen     int64                   // guarded by intakeMu; lane registry size when last read (-1: never)
	regNow      int64                   // guarded by intakeMu; lane registry size as the last read saw it
	ownCursor   map[string]string       // guarded by intakeMu; own-pending read position per lane key, "" = done
	claimCursor map[string]string       // guarded by intakeMu; XAUTOCLAIM cursor per lane key
	backlog     atomic.Bool             // the last feed read filled the free room: more is waiting in the lanes

	replyBufs replyBufs // raw XREADGROUP reply buffers, reused (resp.go)

	evMu     sync.Mutex
	evCursor string // guarded by evMu; events stream position ("" = not started)
}

// Delivery is one request handed to the adapter by Next. Fields are
// read-only for the adapter.
type Delivery struct {
	EntryID    string           // the compute.request entry
	JobID      string           // wire.JobID(EntryID): the job and compute.job entry id
	Module     string           // the entry's source_module (the unit of fairness)
	Priority   int              // request priority 0..9 (decoded, not the lane)
	Deadline   time.Time        // the request's deadline; zero if none
	Deliveries int              // times delivered so far, this one included (1 the first time)
	Request    wire.Request     // decoded, defaults filled
	Entry      blackboard.Entry // the entry as posted (from the intake message)
	Lane       int              // priority of the intake lane it was read from
	MessageID  string           // intake stream message id
	Received   time.Time        // when this broker read it

	lease    Lease
	stream   string // the intake lane's key
	raw      string // the intake message's entry field, kept for dead letters
	replayed bool   // says it came back from the dead-letter stream (verified before it skips the admission limits)
	selfOnly bool   // not the named entry's own message (ids or modules disagree): refused as itself only
	poison   bool   // the entry did not decode or validate: it may not be the named entry's

	oversize       int    // > 0: the message's size, measured by Redis; raw is only its prefix
	oversizeDigest string // then the whole message's digest, as Redis computed it
}

// New returns a Broker for the board of store on rdb. It starts nothing;
// call Run.
func New(rdb redis.UniversalClient, store *blackboard.Store, cfg Config) (*Broker, error) {
	if rdb == nil || store == nil {
		return nil, errors.New("broker: new: nil redis client or store")
	}
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	js := cfg.Jobs
	if js == nil {
		var err error
		if js, err = jobs.New(rdb, store, jobs.Config{Clock: cfg.Clock, Logger: cfg.Logger}); err != nil {
			return nil, fmt.Errorf("broker: %w", err)
		}
	}
	b := &Broker{
		rdb:   rdb,
		store: store,
		jobs:  js,
		keys:  store.Keys(),
		cfg:   cfg,
		log:   cfg.Logger.With("component", "broker", "consumer", cfg.Consumer),
		inbox: NewInbox(InboxConfig{
			Capacity:      cfg.InboxCapacity,
			LeaseTimeout:  cfg.LeaseTimeout,
			MaxDeliveries: cfg.DeliveryLimit,
			Clock:         cfg.Clock,
		}),
		admit:       newAdmission(cfg),
		m:           newCounters(cfg.Clock),
		replyBufs:   make(replyBufs, 2*NumPriorities),
		regSeen:     -1,
		ownCursor:   map[string]string{},
		claimCursor: map[string]string{},
	}
	b.setLanes(newLaneSet(b.legacyLanes()))
	return b, nil
}

// Inbox returns the broker's in-memory inbox, for depth and inspection.
// Requests enter it only through the feed; callers should not Push or Pop.
func (b *Broker) Inbox() *Inbox { return b.inbox }

// EnsureGroups creates the consumer group on every intake lane (and the
// lanes themselves), starting at the beginning so that requests posted
// before any broker ran are read: the legacy shared lanes of a trusted
// board, and every per-module lane in the lane registry. Run calls it; it
// is idempotent.
func (b *Broker) EnsureGroups(ctx context.Context) error {
	b.intakeMu.Lock()
	defer b.intakeMu.Unlock()
	for _, l := range b.lanes.lanes {
		if err := b.createGroup(ctx, l.key); err != nil {
			return err
		}
	}
	if err := b.discoverLanes(ctx); err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	return nil
}

// Run reads, reclaims, expires and watches for cancellations until ctx is
// done, then returns nil. Redis errors are logged and retried with backoff;
// Run returns an error only if the groups cannot be created at start.
func (b *Broker) Run(ctx context.Context) error {
	if err := b.EnsureGroups(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { b.feedLoop(ctx); return nil })
	g.Go(func() error {
		b.tickLoop(ctx, "reclaim", b.cfg.ReclaimInterval, func(ctx context.Context) error {
			_, err := b.reclaimStep(ctx)
			return err
		})
		return nil
	})
	g.Go(func() error { b.tickLoop(ctx, "expiry", b.cfg.ExpiryInterval, b.expiryStep); return nil })
	g.Go(func() error {
		b.tickLoop(ctx, "cancel check", b.cfg.CancelCheckInterval, pacedCancel(b.cfg.Clock, b.cancelScan))
		return nil
	})
	g.Go(func() error { b.eventsLoop(ctx); return nil })
	return g.Wait()
}

func (b *Broker) feedLoop(ctx context.Context) {
	var bo backoff
	for ctx.Err() == nil {
		n, err := b.feedStep(ctx, b.cfg.ReadBlock)
		if err != nil {
			b.loopError(ctx, "feed", err, &bo)
			continue
		}
		bo.reset()
		if n > 0 {
			if b.backlog.Load() {
				b.awaitRoom(ctx)
			}
			continue
		}
		if n := int(b.nlanes.Load()); n == 0 || b.inbox.Free() < max(n, NumPriorities) {
			// Full, or too little room for a bounded blocking read: wait
			// for the adapter to make room (backpressure: unread requests
			// stay in Redis). With no lane yet (a board with ACLs before
			// its first module posts), look for new lanes now and then.
			t := time.NewTimer(b.cfg.ReadBlock / 10)
			select {
			case <-ctx.Done():
			case <-b.inbox.Room():
			case <-t.C:
			}
			t.Stop()
		}
	}
}

// awaitRoom is the feed's hysteresis under backpressure: when the last
// read filled the inbox and more requests wait in the lanes, it waits until
// a batch of readBatchMin fits (or ReadBlock/10 passes) instead of reading
// them one by one as single slots free up — one round trip per request
// costs Redis and the adapter's hand-offs more than the wait costs. The
// next read still takes the most urgent lane first.
func (b *Broker) awaitRoom(ctx context.Context) {
	want := min(readBatchMin, max(1, b.inbox.Capacity()/8))
	if b.inbox.Free() >= want {
		return
	}
	t := time.NewTimer(b.cfg.ReadBlock / 10)
	defer t.Stop()
	for b.inbox.Free() < want {
		select {
		case <-ctx.Done():
			return
		case <-b.inbox.Room():
		case <-t.C:
			return
		}
	}
}

// readBatchMin is the smallest read the feed waits for under backpressure.
const readBatchMin = 256

func (b *Broker) tickLoop(ctx context.Context, name string, every time.Duration, step func(context.Context) error) {
	t := time.NewTicker(every)
	defer t.Stop()
	var bo backoff
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := step(ctx); err != nil {
			b.loopError(ctx, name, err, &bo)
		} else {
			bo.reset()
		}
	}
}

// eventsLoop watches the events stream for retractions (eventsStep). Every
// consume, claim and job entry change is an event too, several per job,
// so on a busy board a read that found some but not a full batch is
// followed by a pause of eventsGather (at most ReadBlock/10) in which the
// next ones gather: one read of many instead of a read, its reply and the
// loop's wake-up for every few events (the e2e bench's throughput part
// made 2.5 fewer XREADs per job: 4.1 in all against 6.6). A retraction
// is acted on within that pause; a quiet board's blocking read returns
// at once as before.
func (b *Broker) eventsLoop(ctx context.Context) {
	var bo backoff
	gather := min(eventsGather, b.cfg.ReadBlock/10)
	for ctx.Err() == nil {
		read, _, err := b.eventsStep(ctx, b.cfg.ReadBlock)
		if err != nil {
			b.loopError(ctx, "events", err, &bo)
			continue
		}
		bo.reset()
		if read > 0 && read < eventsBatch && gather > 0 {
			t := time.NewTimer(gather)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}
}

// eventsGather is the events loop's pause after a read that found some
// events (see eventsLoop); eventsBatch is the most one read takes.
const (
	eventsGather = 50 * time.Millisecond
	eventsBatch  = 500
)

// loopError logs a failed step and sleeps before the next try.
func (b *Broker) loopError(ctx context.Context, loop string, err error, bo *backoff) {
	if ctx.Err() != nil {
		return
	}
	if isNoGroup(err) {
		if gerr := b.EnsureGroups(ctx); gerr != nil {
			err = errors.Join(err, gerr)
		}
	}
	b.log.Warn("step failed", "loop", loop, "err", err)
	t := time.NewTimer(bo.next())
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	t.Stop()
}

func isNoGroup(err error) bool { return err != nil && strings.Contains(err.Error(), "NOGROUP") }

// backoff doubles from 50ms to 5s.
type backoff struct{ d time.Duration }

func (bo *backoff) next() time.Duration {
	bo.d = min(max(2*bo.d, 50*time.Millisecond), 5*time.Second)
	return bo.d
}
func (bo *backoff) reset() { bo.d = 0 }

// Next blocks until a request is ready for the adapter, or ctx is done.
// Before handing it out it re-reads the request entry's status (one round
// trip; NextBatch leaves the check to Accept/AcceptBatch, which make it
// atomically with creating the job record): a retracted or superseded
// request is cancelled and an expired one expired, never handed out. The
// adapter must then call Accept, Release or Reject within LeaseTimeout, or
// the request is handed out again.
func (b *Broker) Next(ctx context.Context) (*Delivery, error) {
	for {
		var d *Delivery
		if err := b.inbox.pop(ctx, 1, func(e *entry) { d = handOut(e) }); err != nil {
			return nil, err
		}
		ok, err := b.handOff(ctx, d)
		if err != nil {
			_ = b.inbox.Return(d.lease)
			return nil, fmt.Errorf("broker: next %s: %w", d.EntryID, err)
		}
		if ok {
			b.m.handedOut.Add(1)
			return d, nil
		}
		_ = b.inbox.Ack(d.lease) // finished here (cancelled or expired)
	}
}

// handOut is the delivery handed out for e, just leased by the inbox (it
// runs under the inbox's lock, inside pop). A hand-out must not share
// mutable state with an earlier one of the same request: the earlier
// holder's lease (and Deliveries) must stay what they were, so that its
// Accept or Release fails with ErrLeaseLost instead of acting on the new
// lease. The first hand-out therefore gives out the inbox's own Delivery,
// stamping its lease and count, and every later one (after a lapse,
// Release, Requeue or a failed hand-off: lease.Token already set) a copy.
// The inbox's Delivery is written only here, under the lock, and never
// again once handed out, so the broker's other readers (which reach it
// through the inbox, under the same lock) and the first holder never race.
// Most requests are handed out once: no copy, no allocation per hand-out.
func handOut(e *entry) *Delivery {
	d := e.Value.(*Delivery)
	if d.lease.Token != 0 {
		c := *d
		d = &c
	}
	d.lease, d.Deliveries = e.lease, e.Deliveries
	return d
}

// handOff checks the request entry's current status; false means the
// request was finished here instead (cancelled or expired). A lapsed TTL
// ends the request without a read (the entry would read as gone or
// expired, which ends it the same way); otherwise one HGET of the status.
func (b *Broker) handOff(ctx context.Context, d *Delivery) (bool, error) {
	if d.Entry.IsExpired(b.cfg.Clock.Now()) {
		return false, b.expire(ctx, d)
	}
	st, err := b.rdb.HGet(ctx, b.keys.Entry(d.EntryID), "status").Result()
	return b.settle(ctx, d, st, err)
}

// settle finishes a hand-off on the request entry's status as read (err
// redis.Nil: the entry is gone).
func (b *Broker) settle(ctx context.Context, d *Delivery, st string, err error) (bool, error) {
	switch {
	case errors.Is(err, redis.Nil):
		// Removed or evicted: the intake message carries the entry, and its
		// TTL has not lapsed, so it goes ahead.
		return true, nil
	case isWrongType(err): // the entry key is not a HASH: refused at once
		_, err = b.refuseWrongType(ctx, d, "")
		return false, err
	case err != nil:
		return false, err
	}
	switch blackboard.Status(st) {
	case blackboard.StatusRetracted, blackboard.StatusSuperseded:
		return false, b.cancelQueued(ctx, d, "request entry "+st+" before it started")
	case blackboard.StatusExpired:
		return false, b.expire(ctx, d)
	}
	return true, nil
}

// Release gives a delivery back to the inbox untouched (it keeps its place
// and is handed out again; the delivery counts against DeliveryLimit).
func (b *Broker) Release(d *Delivery) error {
	if err := b.inbox.Nack(d.lease); err != nil {
		return fmt.Errorf("broker: release %s: %w", d.EntryID, err)
	}
	return nil
}

// Reject refuses a delivery after hand-off (the adapter found it
// impossible, say): it is dead-lettered with reason "rejected", its job
// entry says rejected with werr's code, and the request is consumed.
func (b *Broker) Reject(ctx context.Context, d *Delivery, werr *wire.Error) error {
	if werr == nil {
		return fmt.Errorf("broker: reject %s: nil reason", d.EntryID)
	}
	if _, err := b.inbox.Extend(d.lease); err != nil {
		return fmt.Errorf("broker: reject %s: %w", d.EntryID, err)
	}
	if err := b.deadLetter(ctx, d, ReasonRejected, werr); err != nil {
		return fmt.Errorf("broker: reject %s: %w", d.EntryID, err)
	}
	_ = b.inbox.Ack(d.lease)
	return nil
}

// Accept makes a delivery a job, durably and once per idempotency key:
//
//  1. the job record P:job:<id> is created (with P:jobs:idem and
//     P:jobs:active), unless the idempotency key already maps to a job
//     (jobs.Store.Accept);
//  2. the compute.job entry (status queued) is posted if absent
//     (jobs.Store.PublishAccepted);
//  3. the request entry is marked consumed (jobs.Store.ConsumeAccepted) and
//     the intake message acked.
//
// (AcceptBatch takes the three steps in one Lua step for a new request that
// gets a new job.) A crash between steps leaves the message unacked: it is delivered again
// (to this or another broker), step 1 finds the record, and steps 2 and 3
// are completed; the request is never lost and its job never created twice.
// created is false when the record already existed: on a redelivery, or for
// a duplicate idempotency key (job.RequestEntryID then names the first
// request). Either way the adapter starts a job only through
// jobs.Store.Transition(queued → running), which succeeds once.
//
// If the request entry is retracted, superseded or expired when the record
// would be created (accept.lua reads its status in the same atomic step),
// no job is created: the request ends as cancelled or expired, as in Next,
// and Accept returns that job (status cancelled or expired, created false)
// with a nil error. This is the check that keeps a withdrawn request from
// ever starting; NextBatch leaves it to Accept.
//
// Accept fails with ErrLeaseLost when the delivery was withdrawn (retracted,
// dropped, requeued) or its lease lapsed; the adapter then drops it. On
// other errors the lease is left to lapse, so the request is handed out
// again later.
func (b *Broker) Accept(ctx context.Context, d *Delivery) (job jobs.Job, created bool, err error) {
	if _, err := b.inbox.Extend(d.lease); err != nil {
		return jobs.Job{}, false, fmt.Errorf("broker: accept %s: %w", d.EntryID, err)
	}
	job, created, err = b.acceptRecord(ctx, d)
	if w, ok := err.(*withdrawn); ok {
		// Retracted, superseded or expired since the hand-off: no job; the
		// request ends here, and the caller gets its final status.
		if job, err = b.finishWithdrawn(ctx, d, w.status); err != nil {
			return jobs.Job{}, false, fmt.Errorf("broker: accept %s: %w", d.EntryID, err)
		}
		_ = b.inbox.Ack(d.lease)
		return job, false, nil
	}
	if err == nil {
		err = b.publishJob(ctx, d, job)
	}
	if err == nil {
		job, err = b.finishAccept(ctx, d, job)
	}
	if err != nil {
		return jobs.Job{}, false, fmt.Errorf("broker: accept %s: %w", d.EntryID, err)
	}
	_ = b.inbox.Ack(d.lease)
	b.m.accepted.Add(1)
	return job, created, nil
}

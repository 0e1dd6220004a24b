package broker

import (
	"context"
	"strings"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/wire"
)

// The broker's side of making a delivery a job. The job store (package
// jobs) owns the record, the job entry and consuming the request entry;
// the broker adds the lease, the intake message's acknowledgement and the
// endings of a request that gets no job.

// acceptSpec is what the job store needs of d to make its job.
func acceptSpec(d *Delivery) jobs.AcceptSpec {
	return jobs.AcceptSpec{JobID: d.JobID, EntryID: d.EntryID, Module: d.Module, Request: d.Request, Submitted: d.Entry.Timestamp,
		RequestData: d.Entry.Data}
}

// acceptRecord is Accept's step 1 (jobs.Store.Accept). A request whose
// entry was retracted, superseded or expired meanwhile gets no record: the
// error is then a *withdrawn (see finishWithdrawn).
func (b *Broker) acceptRecord(ctx context.Context, d *Delivery) (jobs.Job, bool, error) {
	r, err := b.jobs.Accept(ctx, acceptSpec(d))
	if err != nil {
		return jobs.Job{}, false, err
	}
	if w := withdrawnOf(r); w != nil {
		return jobs.Job{}, false, w
	}
	return r.Job, r.Created, nil
}

// withdrawnOf is the *withdrawn of an accept result that made no record
// because of the request entry, or nil.
func withdrawnOf(r jobs.AcceptResult) *withdrawn {
	switch {
	case r.WrongType != "":
		return &withdrawn{status: blackboard.Status(wrongTypePrefix + r.WrongType)}
	case r.Withdrawn != "":
		return &withdrawn{status: r.Withdrawn}
	}
	return nil
}

// withdrawn is accept.lua's refusal: the request entry's status when the
// record would have been created (retracted, superseded or expired), or
// wrongTypePrefix and the type its key holds instead of a HASH.
type withdrawn struct{ status blackboard.Status }

func (w *withdrawn) Error() string { return "request entry " + string(w.status) + " before it started" }

// finishWithdrawn ends a request that accept.lua refused, as Next does when
// its status re-read finds the same: cancelled (retracted, superseded) or
// expired, job entry, entry status and ack. It returns the job as it ends:
// the job entry's data, in its final status.
func (b *Broker) finishWithdrawn(ctx context.Context, d *Delivery, st blackboard.Status) (jobs.Job, error) {
	var jd wire.JobData
	var err error
	if typ, ok := strings.CutPrefix(string(st), wrongTypePrefix); ok {
		jd, err = b.refuseWrongType(ctx, d, typ)
	} else if st == blackboard.StatusExpired {
		jd, err = b.expireJob(ctx, d)
	} else {
		jd, err = b.cancelQueuedJob(ctx, d, "request entry "+string(st)+" before it started")
	}
	if err != nil {
		return jobs.Job{}, err
	}
	return jobs.Job{JobData: jd, Module: d.Module, Request: d.Request}, nil
}

// publishJob is Accept's step 2 (jobs.Store.PublishAccepted): the job
// entry, or a duplicate request's own entry naming the job.
func (b *Broker) publishJob(ctx context.Context, d *Delivery, j jobs.Job) error {
	return b.jobs.PublishAccepted(ctx, acceptSpec(d), j)
}

// finishAccept is Accept's step 3: consume the request entry and ack the
// message. If the poster retracted the request meanwhile, a job this
// request created is cancelled before it can start.
func (b *Broker) finishAccept(ctx context.Context, d *Delivery, j jobs.Job) (jobs.Job, error) {
	j, err := b.jobs.ConsumeAccepted(ctx, acceptSpec(d), j)
	if err != nil {
		return jobs.Job{}, err
	}
	return j, b.ack(ctx, d, nil)
}

// putJobEntry posts jd's compute.job entry unless one exists: the entry of
// a request that ends before it has a record.
func (b *Broker) putJobEntry(ctx context.Context, jd wire.JobData) (bool, error) {
	return b.jobs.PostJobEntry(ctx, jd)
}

package broker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/wire"
)

// ReasonEntryWrongType is the dead-letter reason of a request whose entry
// key holds something other than a HASH (code invalid_value): nothing can
// read or consume it, so it is refused at once instead of retried.
const ReasonEntryWrongType = "entry_wrong_type"

// deadLetter refuses a request, in this order, so that whoever sees the
// job entry say rejected finds the dead letter, and a crash anywhere is
// finished by resume without a second dead letter:
//
//  1. a queued job record an interrupted Accept left is ended (retireRecord);
//  2. the dead letter is written, once per message (deadletter.lua, while
//     this consumer owns the message; a mark makes a redelivery's write a
//     no-op);
//  3. the rejected compute.job entry is posted;
//  4. the request entry is consumed;
//  5. the message is acked and deleted and the mark cleared (ack.lua).
//
// The job entry and the dead letter are not one atomic step: the entry is
// the blackboard's (post.lua), which writes no broker stream. Step 2 before
// step 3 gives what the poster needs: a rejection is never visible before
// its dead letter.
func (b *Broker) deadLetter(ctx context.Context, d *Delivery, reason string, werr *wire.Error) error {
	_, err := b.refuse(ctx, d, reason, werr)
	return err
}

// wrongTypePrefix marks a withdrawn status that is really accept.lua's
// finding that the request entry key is not a HASH ("wrongtype:<type>").
const wrongTypePrefix = "wrongtype:"

// refuseWrongType dead-letters a request whose entry key holds typ (""
// when unknown) instead of a HASH, and returns its rejected job's data.
func (b *Broker) refuseWrongType(ctx context.Context, d *Delivery, typ string) (wire.JobData, error) {
	what := "another type"
	if typ != "" {
		what = "a " + typ
	}
	return b.refuse(ctx, d, ReasonEntryWrongType, &wire.Error{Code: wire.CodeInvalidValue,
		Message: "the request entry key holds " + what + ", not a HASH (WRONGTYPE): nothing can read or consume it"})
}

// refuse is deadLetter, returning the job entry's data (rejected, or
// cancelled when dropped).
func (b *Broker) refuse(ctx context.Context, d *Delivery, reason string, werr *wire.Error) (wire.JobData, error) {
	now := b.cfg.Clock.Now()
	info := jobs.EntryInfo(d.Entry)
	if d.Entry.ID == "" { // undecodable entry: only the id is known
		info = wire.EntryInfo{ID: d.EntryID}
	}
	jd := wire.RejectedJob(info, werr, epoch(now))
	if d.Request.IdempotencyKey != "" {
		jd.IdempotencyKey, jd.Account, jd.Priority = d.Request.IdempotencyKey, d.Request.Account, d.Request.Priority
	}
	if err := b.retireRecord(ctx, d, wire.JobFailed, &wire.JobError{Code: string(werr.Code), Message: werr.Message}); err != nil {
		return jd, err
	}
	if reason == ReasonDropped {
		jd.Status, jd.ReasonCode = wire.JobCancelled, ""
		jd.Error = &wire.JobError{Code: ReasonDropped, Message: werr.Message}
	}
	owned, err := b.writeDeadLetter(ctx, d, b.deadFields(d, reason, werr, now))
	if err != nil || !owned {
		return jd, err
	}
	if _, err := b.putJobEntry(ctx, jd); err != nil {
		return jd, err
	}
	if err := b.consumeEntry(ctx, d.EntryID); err != nil {
		return jd, err
	}
	if err := b.ack(ctx, d, nil); err != nil {
		return jd, err
	}
	if reason != ReasonDropped {
		b.m.rejected(string(werr.Code))
	}
	b.log.Info("request dead-lettered", "entry_id", d.EntryID, "reason", reason, "code", werr.Code, "msg", werr.Message)
	b.jobs.EmitFinished(ctx, jd)
	return jd, nil
}

// writeDeadLetter is deadLetter's step 2. owned is false when the message
// is finished or owned by another consumer: nothing more is done here.
func (b *Broker) writeDeadLetter(ctx context.Context, d *Delivery, fields []any) (owned bool, err error) {
	args := append(b.ackArgs(d), fields...)
	res, err := scriptDeadLetter.Run(ctx, b.rdb, b.ackKeys(d), args...).Slice()
	if err != nil {
		return false, fmt.Errorf("dead letter %s: %w", d.MessageID, err)
	}
	switch code, _ := res[0].(int64); code {
	case 1:
		b.m.deadLettered.Add(1)
	case 0:
		return false, nil
	case -1:
		b.log.Info("request taken over by another consumer before it was finished here", "entry_id", d.EntryID)
		return false, nil
	case -2:
		return false, fmt.Errorf("dead letter %s: %w", d.MessageID, b.fencedErr())
	}
	return true, nil
}

// ackKeys and ackArgs are the KEYS and first ARGV of ack.lua and
// deadletter.lua for d: lane, dead-letter stream, marks; group, consumer,
// message id, the stream's MAXLEN and MINID.
// A scheduler's broker (its job store fenced) adds the fencing epoch key
// and its epoch: a deposed scheduler acknowledges and dead-letters nothing.
func (b *Broker) ackKeys(d *Delivery) []string {
	if f := b.jobs.Fence(); f.Key != "" {
		return []string{d.stream, b.keys.DLQ(), b.keys.DLQWritten(), f.Key}
	}
	return []string{d.stream, b.keys.DLQ(), b.keys.DLQWritten()}
}

// fencedErr says this broker's scheduler was deposed.
func (b *Broker) fencedErr() error {
	return fmt.Errorf("%w: epoch %d is no longer the scheduler's", jobs.ErrFenced, b.jobs.Fence().Epoch)
}

func (b *Broker) ackArgs(d *Delivery) []any {
	minID := ""
	if b.cfg.DLQMaxAge > 0 {
		minID = strconv.FormatInt(b.cfg.Clock.Now().Add(-b.cfg.DLQMaxAge).UnixMilli(), 10) + "-0"
	}
	epoch := ""
	if f := b.jobs.Fence(); f.Key != "" {
		epoch = strconv.FormatInt(f.Epoch, 10)
	}
	return []any{blackboard.InboxGroup, b.cfg.Consumer, d.MessageID, b.cfg.DLQMaxLen, minID, epoch}
}

// deadFields are a dead letter's fields. The entry is kept verbatim up to
// DLQEntryBytes; a longer one keeps its first DLQEntryBytes bytes and
// truncated "1". entry_bytes and entry_digest describe the whole entry.
func (b *Broker) deadFields(d *Delivery, reason string, werr *wire.Error, now time.Time) []any {
	code, msg := "", ""
	if werr != nil {
		code, msg = string(werr.Code), werr.Message
	}
	entry, size, sum := d.raw, len(d.raw), digest([]byte(d.raw))
	if d.oversize > 0 { // measured by Redis: only a prefix travelled
		size, sum = d.oversize, d.oversizeDigest
	}
	f := []any{
		"entry_id", d.EntryID, "reason", reason, "code", code, "message", msg,
		"failed_at", formatEpoch(now), "deliveries", strconv.Itoa(d.Deliveries),
		"entry_bytes", strconv.Itoa(size), "entry_digest", sum, "lane", d.stream,
	}
	if len(entry) > b.cfg.DLQEntryBytes || d.oversize > 0 {
		entry = strings.ToValidUTF8(entry[:min(len(entry), b.cfg.DLQEntryBytes)], "")
		f = append(f, "truncated", "1")
	}
	return append(f, "entry", entry)
}

// digest is "sha256:<hex>" of p.
func digest(p []byte) string {
	sum := sha256.Sum256(p)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// isWrongType reports a Redis WRONGTYPE error: a key holds another type.
func isWrongType(err error) bool { return err != nil && strings.Contains(err.Error(), "WRONGTYPE") }

package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/wire"
)

// Dead-letter reasons (the reason field of a dead letter; code carries the
// wire reason code).
const (
	ReasonInvalid       = "invalid"        // the request failed to decode (poison)
	ReasonRejected      = "rejected"       // refused by Config.Check, the admission limits or Reject
	ReasonDeliveryLimit = "delivery_limit" // delivered more than DeliveryLimit times
	ReasonDropped       = "dropped"        // dropped by an operator
)

// message is one intake stream message as read.
type message struct {
	lane       int   // the lane's priority
	src        *lane // the lane it was read from
	id         string
	fields     msgFields
	deliveries int // including the read that returned it
}

// msgFields are the intake message fields the broker reads (post.lua also
// writes topic, priority and timestamp, which it does not need). A field
// given twice keeps its last value, as a map would.
type msgFields struct {
	v, entryID, entry, replayed string
}

func (f *msgFields) set(k, v string) {
	switch k {
	case "v":
		f.v = v
	case "entry_id":
		f.entryID = v
	case "entry":
		f.entry = v
	case "replayed":
		f.replayed = v
	}
}

// feedStep reads new requests into the inbox: first (once after start)
// this consumer's own pending ones, then new ones from the lanes, most
// urgent first, never more than the inbox has room for. When the inbox is
// full it reads nothing, so unread requests stay in Redis (backpressure).
// With block > 0 and nothing new, it waits up to block for requests. It
// returns how many messages it read.
func (b *Broker) feedStep(ctx context.Context, block time.Duration) (int, error) {
	b.intakeMu.Lock()
	defer b.intakeMu.Unlock()
	if b.regSeen != b.regNow {
		if err := b.discoverLanes(ctx); err != nil {
			return 0, err
		}
	}
	n, err := b.readOwn(ctx)
	if err != nil {
		return n, err
	}
	room := b.inbox.Free()
	if room <= 0 {
		b.backlog.Store(true)
		return n, nil
	}
	msgs, err := b.readNew(ctx, room)
	if err == nil && b.regSeen != b.regNow {
		// New lanes were registered: read them now, not a step later.
		if err = b.discoverLanes(ctx); err == nil && room > len(msgs) {
			var more []message
			more, err = b.readNew(ctx, room-len(msgs))
			msgs = append(msgs, more...)
		}
	}
	if err != nil {
		b.m.read.Add(int64(len(msgs)))
		b.m.intake.add(len(msgs))
		return n + len(msgs), errors.Join(err, b.ingest(ctx, msgs))
	}
	b.backlog.Store(len(msgs) == room)
	if len(msgs) == 0 && block > 0 && room >= len(b.lanes.lanes) && n == 0 && b.regSeen == b.regNow {
		// A module's first request on a lane waits in a lane this read does
		// not block on: wait a tenth of block, so the next step's read
		// (which sees the lane registry grow) finds it soon.
		msgs, err = b.readBlocking(ctx, room, max(block/laneCheckDivisor, time.Millisecond))
		if err != nil {
			return n, err
		}
	}
	b.m.read.Add(int64(len(msgs)))
	b.m.intake.add(len(msgs))
	ahead, err := b.ingestReadingAhead(ctx, msgs)
	return n + len(msgs) + ahead, err
}

// laneCheckDivisor: a blocking read waits ReadBlock/laneCheckDivisor, so
// a lane registered meanwhile is found that soon.
const laneCheckDivisor = 10

// readAheadRounds bounds the reads one feed step makes ahead of its
// ingestion (intakeMu is held throughout the step).
const readAheadRounds = 8

// ingestReadingAhead ingests msgs, just read, and meanwhile reads the next
// new messages, as many as the inbox is sure to have room for once msgs
// are in (the free room less len(msgs): only the feed and the reclaimer
// push, both under intakeMu, which the caller holds), then ingests those
// the same way, up to readAheadRounds reads. Redis serving a read, and the
// reply's parsing, overlap the decoding of the read before instead of
// adding to it; messages are still ingested in read order, and each read
// still takes the most urgent lane first. It stops when a read returns
// nothing or the room left is below what awaitRoom waits for, and returns
// how many messages it read.
func (b *Broker) ingestReadingAhead(ctx context.Context, msgs []message) (int, error) {
	type result struct {
		msgs []message
		err  error
	}
	want := min(readBatchMin, max(1, b.inbox.Capacity()/8))
	total := 0
	var errs []error
	for round := 0; ; round++ {
		var ahead chan result
		room := b.inbox.Free() - len(msgs)
		if len(msgs) > 0 && len(errs) == 0 && round < readAheadRounds && room >= want {
			ahead = make(chan result, 1)
			go func() {
				ms, err := b.readNew(ctx, room)
				ahead <- result{ms, err}
			}()
		}
		if err := b.ingest(ctx, msgs); err != nil {
			errs = append(errs, err)
		}
		if ahead == nil {
			return total, errors.Join(errs...)
		}
		r := <-ahead
		if r.err != nil {
			errs = append(errs, r.err)
		} else {
			b.backlog.Store(len(r.msgs) == room)
		}
		msgs = r.msgs
		total += len(msgs)
		b.m.read.Add(int64(len(msgs)))
		b.m.intake.add(len(msgs))
	}
}

// readOwn re-reads, once per lane, the messages still pending for this
// consumer name from an earlier run.
func (b *Broker) readOwn(ctx context.Context) (int, error) {
	b.ownStarted = true
	total := 0
	for _, l := range b.lanes.lanes {
		for b.ownCursor[l.key] != "" {
			room := min(b.inbox.Free(), 256, b.readCap())
			if room <= 0 {
				return total, nil
			}
			res, err := scriptOwn.Run(ctx, b.rdb, []string{l.key},
				blackboard.InboxGroup, b.cfg.Consumer, b.ownCursor[l.key], room, b.cfg.MaxMessageBytes, b.cfg.DLQEntryBytes).Slice()
			if err != nil {
				return total, fmt.Errorf("read own pending %s: %w", l.key, err)
			}
			msgs := parseCounted(l, res)
			if len(res) < room {
				b.ownCursor[l.key] = ""
			} else if len(msgs) > 0 {
				b.ownCursor[l.key] = msgs[len(msgs)-1].id
			}
			b.m.read.Add(int64(len(msgs)))
			total += len(msgs)
			if err := b.ingest(ctx, msgs); err != nil {
				return total, err
			}
		}
	}
	return total, nil
}

// readNew reads up to room new messages, most urgent level first and,
// within a level, the room split fairly across the lanes (the modules)
// that have messages: read.lua plans the read in one round trip, then the
// planned lanes are read with XREADGROUP in one pipeline. Messages read
// before an error are returned with it (they are delivered: dropping them
// would leave them pending). It also notes the lane registry's size, so
// the next feed step discovers new lanes.
func (b *Broker) readNew(ctx context.Context, room int) ([]message, error) {
	room = min(room, b.readCap()) // the read's byte budget (budget.go)
	ls := b.lanes
	keys := append(ls.keys(), b.keys.InboxLanes())
	args := []any{blackboard.InboxGroup, b.cfg.Consumer, room}
	for _, n := range ls.levels {
		args = append(args, n)
	}
	res, err := scriptRead.Run(ctx, b.rdb, keys, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	if len(res) != 3 {
		return nil, fmt.Errorf("read: unexpected reply %v", res)
	}
	plan, _ := res[0].([]any)
	inline, _ := res[1].([]any)
	if n, ok := res[2].(int64); ok {
		b.regNow = n
	}
	byLane := make([][]message, len(ls.lanes)) // by KEYS index, most urgent first
	for _, r := range inline {
		t, _ := r.([]any)
		if len(t) != 3 {
			continue
		}
		i, _ := t[0].(int64)
		if i < 1 || int(i) > len(ls.lanes) {
			continue
		}
		id, _ := t[1].(string)
		l := ls.lanes[i-1]
		byLane[i-1] = append(byLane[i-1], message{lane: l.prio, src: l, id: id, fields: parseFields(t[2]), deliveries: 1})
	}
	var errs []error
	if len(plan) > 0 {
		// The replies are streamed raw, one after the other, into one
		// reused buffer and parsed in place (resp.go): one allocation per
		// message.
		cmds := make([]*redis.RawWriteToCmd, len(ls.lanes))
		var order []int // lanes (KEYS index - 1) in pipeline order
		buf := b.replyBufs.get().capped(b.cfg.MaxMessageBytes, b.cfg.MaxReadBytes, b.cfg.DLQEntryBytes)
		defer b.replyBufs.put(buf)
		_, _ = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for k := 0; k+1 < len(plan); k += 2 {
				i, _ := plan[k].(int64)
				n, _ := plan[k+1].(int64)
				if i < 1 || int(i) > len(ls.lanes) || n <= 0 || cmds[i-1] != nil {
					continue
				}
				cmds[i-1] = redis.NewRawWriteToCmd(ctx, buf, "XREADGROUP", "GROUP", blackboard.InboxGroup,
					b.cfg.Consumer, "COUNT", n, "STREAMS", ls.lanes[i-1].key, ">")
				_ = p.Process(ctx, cmds[i-1])
				order = append(order, int(i-1))
			}
			return nil
		})
		off := 0
		for _, k := range order {
			n, err := cmds[k].Result()
			if err != nil {
				// The buffer's layout past this reply is unknown: the
				// lanes not parsed keep their messages pending (reclaimed).
				errs = append(errs, fmt.Errorf("read %s: %w", ls.lanes[k].key, err))
				break
			}
			lo, hi := buf.span(off, int(n)) // oversized fields were cut (resp.go)
			if hi > len(buf.b) {
				errs = append(errs, fmt.Errorf("read %s: %w: reply overruns the buffer", ls.lanes[k].key, errBadReply))
				break
			}
			before := len(byLane[k])
			byLane[k], err = parseStreamReply(buf.b[lo:hi], ls.lanes[k].prio, byLane[k])
			for j := before; j < len(byLane[k]); j++ {
				byLane[k][j].src = ls.lanes[k]
			}
			off += int(n)
			if err != nil {
				errs = append(errs, fmt.Errorf("read %s: %w", ls.lanes[k].key, err))
			}
		}
	}
	n, lanes := 0, 0
	for _, ms := range byLane {
		if len(ms) > 0 {
			n, lanes = n+len(ms), lanes+1
		}
	}
	if lanes <= 1 { // no copy
		for _, ms := range byLane {
			if len(ms) > 0 {
				return ms, errors.Join(errs...)
			}
		}
		return nil, errors.Join(errs...)
	}
	msgs := make([]message, 0, n)
	for _, ms := range byLane {
		msgs = append(msgs, ms...)
	}
	return msgs, errors.Join(errs...)
}

// readBlocking waits up to block for new messages on all lanes. COUNT
// applies per lane, so room/len(lanes) per lane keeps the total in room
// (the caller makes sure room is at least the number of lanes).
func (b *Broker) readBlocking(ctx context.Context, room int, block time.Duration) ([]message, error) {
	room = min(room, b.readCap()) // the read's byte budget (budget.go)
	ls := b.lanes
	if len(ls.lanes) == 0 || room < len(ls.lanes) {
		return nil, nil
	}
	streams := make([]string, 0, 2*len(ls.lanes))
	streams = append(streams, ls.keys()...)
	for range ls.lanes {
		streams = append(streams, ">")
	}
	res, err := b.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: blackboard.InboxGroup, Consumer: b.cfg.Consumer, Streams: streams,
		Count: int64(room / len(ls.lanes)), Block: block,
	}).Result()
	if errors.Is(err, redis.Nil) || (err != nil && ctx.Err() != nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read (blocking): %w", err)
	}
	var msgs []message
	for _, st := range res {
		l := ls.byKey[st.Stream]
		if l == nil {
			continue
		}
		for _, m := range st.Messages {
			var f msgFields
			for k, v := range m.Values {
				s, _ := v.(string)
				f.set(k, s)
			}
			msgs = append(msgs, message{lane: l.prio, src: l, id: m.ID, fields: f, deliveries: 1})
		}
	}
	return msgs, nil
}

// reclaimStep keeps this broker's claim on the requests it holds (so a
// deep inbox is not mistaken for a dead broker), drops the ones it lost,
// and takes over requests another consumer left pending for longer than
// ClaimIdle (XAUTOCLAIM), as far as the inbox has room. It returns how
// many it took over.
func (b *Broker) reclaimStep(ctx context.Context) (int, error) {
	b.intakeMu.Lock()
	defer b.intakeMu.Unlock()
	if err := b.discoverLanes(ctx); err != nil {
		return 0, err
	}
	if err := b.refresh(ctx); err != nil {
		return 0, err
	}
	total := 0
	for _, l := range b.lanes.lanes {
		// A lane's idle backlog is taken in one go, as far as the inbox
		// has room (batches of 256 per script call), not 256 per
		// ReclaimInterval: recovery after a crash is bounded by ClaimIdle
		// plus the time to read, not by the interval.
		for {
			room := min(b.inbox.Free(), 256, b.readCap())
			if room <= 0 {
				return total, nil
			}
			res, err := scriptClaim.Run(ctx, b.rdb, []string{l.key}, blackboard.InboxGroup,
				b.cfg.Consumer, b.cfg.ClaimIdle.Milliseconds(), b.claimCursor[l.key], room, b.cfg.MaxMessageBytes, b.cfg.DLQEntryBytes).Slice()
			if err != nil {
				return total, fmt.Errorf("reclaim %s: %w", l.key, err)
			}
			if len(res) != 3 {
				return total, fmt.Errorf("reclaim %s: unexpected reply %v", l.key, res)
			}
			b.claimCursor[l.key], _ = res[0].(string)
			msgs := parseCounted(l, res[1])
			if del, _ := res[2].([]any); len(del) > 0 {
				b.log.Warn("pending requests were deleted from their lane before being finished",
					"queue", l.key, "count", len(del))
			}
			total += len(msgs)
			b.m.reclaimed.Add(int64(len(msgs)))
			if err := b.ingest(ctx, msgs); err != nil {
				return total, err
			}
			if b.claimCursor[l.key] == "0-0" || len(msgs) == 0 {
				break // the lane's scan is done
			}
		}
	}
	return total, nil
}

// refresh resets the idle time of every request this broker holds, and
// forgets those it no longer owns (finished, or taken over by another
// broker while this one was cut off).
func (b *Broker) refresh(ctx context.Context) error {
	byLane := map[string][]string{}
	owner := map[string]string{} // message id -> entry id
	for _, h := range b.inbox.Snapshot() {
		d := h.Value.(*Delivery)
		byLane[d.stream] = append(byLane[d.stream], d.MessageID)
		owner[d.MessageID] = d.EntryID
	}
	for lane, ids := range byLane {
		for len(ids) > 0 {
			chunk := ids[:min(len(ids), 500)]
			ids = ids[len(chunk):]
			args := []any{blackboard.InboxGroup, b.cfg.Consumer}
			for _, id := range chunk {
				args = append(args, id)
			}
			lost, err := scriptRefresh.Run(ctx, b.rdb, []string{lane}, args...).StringSlice()
			if err != nil {
				return fmt.Errorf("refresh %s: %w", lane, err)
			}
			n := 0
			for _, id := range lost {
				if it, ok := b.inbox.Get(owner[id]); ok && it.Value.(*Delivery).MessageID == id {
					b.inbox.Remove(owner[id])
					n++
				}
			}
			if n > 0 {
				b.m.lost.Add(int64(n))
				b.log.Warn("held requests were finished or taken over elsewhere; forgot them",
					"queue", lane, "count", n)
			}
		}
	}
	return nil
}

// expiryStep collects lapsed leases, dead-letters requests handed out more
// than DeliveryLimit times, and expires queued requests whose TTL lapsed.
func (b *Broker) expiryStep(ctx context.Context) error {
	b.inbox.ExpireLeases()
	var errs []error
	for _, it := range b.inbox.TakeDead() {
		d := new(Delivery)
		*d = *it.Value.(*Delivery) // a copy: a former holder may still read it
		d.Deliveries = it.Deliveries
		werr := &wire.Error{Code: wire.CodeDeliveryLimit, Message: fmt.Sprintf(
			"handed out %d times without being accepted (limit %d)", it.Deliveries, b.cfg.DeliveryLimit)}
		errs = append(errs, b.deadLetter(ctx, d, ReasonDeliveryLimit, werr))
	}
	now := b.cfg.Clock.Now()
	for _, it := range b.inbox.RemoveFunc(func(it Item) bool { return it.Value.(*Delivery).Entry.IsExpired(now) }) {
		errs = append(errs, b.expire(ctx, it.Value.(*Delivery)))
	}
	return errors.Join(errs...)
}

// ingest decides on each read message: dead-letter, expire, finish an
// interrupted earlier decision, or queue it. Errors are collected; a
// message whose handling failed stays pending and is retried after
// ClaimIdle.
//
// Decoding (pure CPU) runs in parallel over the batch (decodeAll); the
// decisions, Check and the pushes then run in message order, so the inbox
// sees the same sequence as with a serial decode.
func (b *Broker) ingest(ctx context.Context, msgs []message) error {
	if len(msgs) == 0 {
		return nil
	}
	decoded := decodeAll(b, msgs, b.cfg.Clock.Now())
	facts, err := b.lookUpRedelivered(ctx, msgs, decoded)
	if err != nil {
		return err // left pending; reclaimed later
	}
	var errs []error
	for i, m := range msgs {
		if err := b.ingestOne(ctx, m, decoded[i].d, decoded[i].werr, facts[i]); err != nil {
			errs = append(errs, fmt.Errorf("request %s (message %s): %w", m.fields.entryID, m.id, err))
		}
	}
	return errors.Join(errs...)
}

// decodedMsg is a message's decode result.
type decodedMsg struct {
	d    *Delivery
	werr *wire.Error
}

// Parallel decoding: batches of at least parallelMin messages are split in
// chunks of decodeChunk, decoded by up to GOMAXPROCS goroutines (the feed's
// own included), each writing only its chunks' slots.
const (
	parallelMin = 64
	decodeChunk = 32
)

func decodeAll(b *Broker, msgs []message, now time.Time) []decodedMsg {
	out := make([]decodedMsg, len(msgs))
	decodeRange := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out[i].d, out[i].werr = b.decode(msgs[i], now)
		}
	}
	workers := min(runtime.GOMAXPROCS(0), (len(msgs)+decodeChunk-1)/decodeChunk)
	if len(msgs) < parallelMin || workers < 2 {
		decodeRange(0, len(msgs))
		return out
	}
	var next atomic.Int64
	work := func() {
		for {
			lo := int(next.Add(decodeChunk)) - decodeChunk
			if lo >= len(msgs) {
				return
			}
			decodeRange(lo, min(lo+decodeChunk, len(msgs)))
		}
	}
	var wg sync.WaitGroup
	for range workers - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
	return out
}

func (b *Broker) ingestOne(ctx context.Context, m message, d *Delivery, werr *wire.Error, f *resumeFacts) error {
	now := b.cfg.Clock.Now()
	if d.EntryID == "" || d.selfOnly {
		// Not even an entry id, or not the named entry's own message (ids
		// or modules disagree): refused as itself, leaving the entry it
		// names, and any job of that entry, alone.
		b.m.rejected(string(werr.Code))
		return b.ack(ctx, d, b.deadFields(d, ReasonInvalid, werr, now))
	}
	if d.poison {
		// Undecodable: it may be anyone's message naming this entry. If
		// the entry is held here under another message, or already has a
		// job, refuse only the message.
		other, err := b.namedElsewhere(ctx, d)
		if err != nil {
			return err
		}
		if other {
			b.m.rejected(string(werr.Code))
			return b.ack(ctx, d, b.deadFields(d, ReasonInvalid, werr, now))
		}
	}
	if d.replayed {
		// Only an operator replay, recorded where posters cannot write,
		// counts (and only its first delivery skips the limits below).
		ok := false
		if m.deliveries == 1 {
			n, err := b.rdb.SRem(ctx, b.keys.Replayed(), replayedMember(d.MessageID, d.stream)).Result()
			if err != nil {
				return fmt.Errorf("verify replay: %w", err)
			}
			ok = n == 1
		}
		d.replayed = ok
	}
	if m.deliveries > 1 {
		handOff, done, err := b.resume(ctx, d, werr == nil, f)
		if done || err != nil {
			return err
		}
		if handOff && m.deliveries <= b.cfg.DeliveryLimit { // accepted already: no checks, no limits
			return b.push(ctx, d, m, now)
		}
	}
	if m.deliveries > b.cfg.DeliveryLimit {
		return b.deadLetter(ctx, d, ReasonDeliveryLimit, &wire.Error{Code: wire.CodeDeliveryLimit,
			Message: fmt.Sprintf("delivered %d times (limit %d)", m.deliveries, b.cfg.DeliveryLimit)})
	}
	if werr != nil {
		return b.deadLetter(ctx, d, ReasonInvalid, werr)
	}
	if !b.mayBill(d.Module, d.Request.Account) {
		return b.deadLetter(ctx, d, ReasonRejected, &wire.Error{Code: wire.CodeAccountNotAllowed,
			Message: fmt.Sprintf("module %q may not bill account %q", d.Module, d.Request.Account)})
	}
	if b.cfg.Check != nil {
		if werr := b.cfg.Check(d.Request); werr != nil {
			return b.deadLetter(ctx, d, ReasonRejected, werr)
		}
	}
	if d.Entry.IsExpired(now) {
		return b.expire(ctx, d)
	}
	if m.deliveries == 1 && !d.replayed {
		if werr := b.admit.admit(d.Module, b.inbox.ModuleLen(d.Module), now); werr != nil {
			return b.deadLetter(ctx, d, ReasonRejected, werr)
		}
	}
	return b.push(ctx, d, m, now)
}

// push queues a decoded request in the inbox.
func (b *Broker) push(ctx context.Context, d *Delivery, m message, now time.Time) error {
	err := b.inbox.Push(Item{
		ID: d.EntryID, Module: d.Module, Priority: d.Priority, Deadline: d.Deadline,
		Arrived: now, Deliveries: m.deliveries - 1, Value: d,
	})
	switch {
	case errors.Is(err, ErrConflict):
		// The entry is already held under another message (a replay while
		// the original waits): that one will finish the entry.
		if h, ok := b.inbox.Get(d.EntryID); ok && h.Value.(*Delivery).MessageID != d.MessageID {
			return b.ack(ctx, d, nil)
		}
		return nil
	case err != nil:
		return err // left pending; reclaimed later
	}
	return nil
}

// decode turns a message into a Delivery; werr says why it is poison.
// d.EntryID is "" only when the message names no valid entry id.
func (b *Broker) decode(m message, now time.Time) (*Delivery, *wire.Error) {
	d := &Delivery{Lane: m.lane, MessageID: m.id, Received: now, raw: m.fields.entry,
		Deliveries: m.deliveries, replayed: m.fields.replayed == "1"}
	if m.src != nil {
		d.stream = m.src.key
	}
	if id := m.fields.entryID; blackboard.ValidID(id) {
		d.EntryID, d.JobID = id, wire.JobID(id)
	}
	bad := func(code wire.Code, format string, a ...any) (*Delivery, *wire.Error) {
		d.poison = true
		return d, &wire.Error{Code: code, Message: fmt.Sprintf(format, a...)}
	}
	notOwn := func(code wire.Code, format string, a ...any) (*Delivery, *wire.Error) {
		d.selfOnly = true
		return bad(code, format, a...)
	}
	if v := m.fields.v; v != "1" && v != "2" {
		return bad(wire.CodeUnsupportedVersion, "intake message version %q, want 1 or 2", v)
	}
	if size, sum, prefix, ok := parseOversize(d.raw); ok { // cut by the read (resp.go)
		d.raw, d.oversize, d.oversizeDigest = prefix, size, sum
		return bad(wire.CodePayloadTooLarge, "intake message field is %d bytes; the limit is %d", size, b.cfg.MaxMessageBytes)
	}
	if len(d.raw) > wire.MaxEntryBytes {
		return bad(wire.CodePayloadTooLarge, "entry is %d bytes; the limit is %d", len(d.raw), wire.MaxEntryBytes)
	}
	var err error
	if d.Entry, err = decodeEntry(d.raw); err != nil {
		return bad(wire.CodeMalformedJSON, "entry: %v", err)
	}
	switch {
	case d.EntryID == "":
		return bad(wire.CodeInvalidValue, "intake message has no valid entry_id")
	case d.Entry.ID != d.EntryID:
		return notOwn(wire.CodeInvalidValue, "entry_id %q does not match the entry's %q", d.EntryID, d.Entry.ID)
	case d.Entry.Topic != blackboard.RequestTopic:
		return bad(wire.CodeInvalidValue, "topic %q is not %s", d.Entry.Topic, blackboard.RequestTopic)
	}
	if err := d.Entry.Validate(); err != nil {
		return bad(wire.CodeInvalidValue, "entry: %v", err)
	}
	if l := m.src; l != nil && l.module != "" {
		// A per-module lane: only its module (its Redis ACL user) can
		// write it, so the lane says who posted.
		// The entry id names the lane's module: the entry is the poster's
		// own (on a board with ACLs only it can write that key), so a
		// refusal may say so on its job entry. Any other id may be
		// someone else's: then the message is refused as itself.
		idm := blackboard.IDModule(d.EntryID)
		own := idm == l.module
		if !own && (idm != "" || b.cfg.Identity == IdentityACL) {
			return notOwn(wire.CodeIdentityMismatch, "entry_id %q is not of the form %s:<32 hex> of the lane's module", d.EntryID, l.module)
		}
		if d.Entry.SourceModule != l.module {
			if own {
				return bad(wire.CodeIdentityMismatch, "source_module %q posted on the lane of module %q", d.Entry.SourceModule, l.module)
			}
			return notOwn(wire.CodeIdentityMismatch, "source_module %q posted on the lane of module %q", d.Entry.SourceModule, l.module)
		}
	}
	d.Module = d.Entry.SourceModule
	r, werr := wire.DecodeRequest(d.Entry.Data, jobs.EntryInfo(d.Entry))
	if werr != nil {
		d.poison = true
		return d, werr
	}
	d.Request, d.Priority = r, r.Priority
	if r.Deadline > 0 {
		d.Deadline = epochTime(r.Deadline)
	}
	return d, nil
}

// resume finishes, for a redelivered message, whatever an earlier delivery
// decided but did not complete (a crash between steps). A job record of
// this request that is still queued means an Accept was interrupted before
// any adapter learnt of the job: handOff asks for it to be handed out
// again (Accept then completes the steps and returns the job). A record
// that has moved on, or a record of another request with the same
// idempotency key, only needs the request consumed and acked. A job entry
// saying rejected, expired or cancelled finishes that refusal. done
// reports that the message needs nothing more.
//
// f, when not nil, holds what resume reads, looked up for the whole batch
// at once (lookUpRedelivered); nil means look it up here.
func (b *Broker) resume(ctx context.Context, d *Delivery, decoded bool, f *resumeFacts) (handOff, done bool, err error) {
	if f == nil {
		f = &resumeFacts{}
		if decoded {
			f.key.JobID, f.key.Err = b.jobs.JobForKey(ctx, d.Module, d.Request.IdempotencyKey)
			if f.key.Err == nil {
				f.key.Job, f.key.JobErr = b.jobs.Get(ctx, f.key.JobID)
			}
		}
		f.entry, f.entryErr = b.store.Get(ctx, d.JobID)
	}
	if decoded {
		switch err := f.key.Err; {
		case err == nil:
			job, err := f.key.Job, f.key.JobErr
			if err != nil {
				return false, false, err
			}
			if job.JobID == d.JobID && job.Status == wire.JobQueued {
				return true, false, nil
			}
			if err := b.publishJob(ctx, d, job); err != nil {
				return false, false, err
			}
			_, err = b.finishAccept(ctx, d, job)
			return false, err == nil, err
		case !errors.Is(err, jobs.ErrNotFound):
			return false, false, err
		}
	}
	e, err := f.entry, f.entryErr
	if errors.Is(err, blackboard.ErrNotFound) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	var jd wire.JobData
	if json.Unmarshal(e.Data, &jd) != nil {
		return false, false, nil
	}
	switch jd.Status {
	case wire.JobRejected:
		werr := &wire.Error{Code: jd.ReasonCode}
		if jd.Error != nil {
			werr.Message = jd.Error.Message
		}
		reason := ReasonRejected
		if jd.ReasonCode == wire.CodeDeliveryLimit {
			reason = ReasonDeliveryLimit
		}
		return false, true, b.deadLetter(ctx, d, reason, werr)
	case wire.JobExpired:
		return false, true, b.expire(ctx, d)
	case wire.JobCancelled:
		return false, true, b.ack(ctx, d, nil)
	}
	return false, false, nil
}

// resumeFacts is what resume reads for one redelivered message: the job
// its idempotency key maps to (when it decoded) and its job entry.
type resumeFacts struct {
	key      jobs.Lookup
	entry    blackboard.Entry
	entryErr error
}

// lookUpRedelivered reads what resume needs for every redelivered message
// of a batch in three round trips, not three per message: a takeover of a
// dead broker's backlog of thousands ran at the speed of a round trip
// (100 requests a second on a loaded machine). facts[i] is nil for a
// first delivery, a message resume never sees, and every message after
// the first naming the same entry (resume of the first may change what
// the others would read: they look it up themselves).
func (b *Broker) lookUpRedelivered(ctx context.Context, msgs []message, decoded []decodedMsg) ([]*resumeFacts, error) {
	facts := make([]*resumeFacts, len(msgs))
	var idx []int
	var refs []jobs.KeyRef
	var refIdx []int
	var entries []string
	seen := map[string]bool{}
	for i, m := range msgs {
		d := decoded[i].d
		if m.deliveries <= 1 || d.EntryID == "" || d.selfOnly || seen[d.EntryID] {
			continue
		}
		seen[d.EntryID] = true
		idx = append(idx, i)
		entries = append(entries, string(d.JobID))
		if decoded[i].werr == nil {
			refIdx = append(refIdx, i)
			refs = append(refs, jobs.KeyRef{Module: d.Module, Key: d.Request.IdempotencyKey})
		}
	}
	if len(idx) == 0 {
		return facts, nil
	}
	found, err := b.jobs.ResolveKeys(ctx, refs)
	if err != nil {
		return nil, err
	}
	es, errs, err := b.store.GetMany(ctx, entries)
	if err != nil {
		return nil, err
	}
	for k, i := range idx {
		facts[i] = &resumeFacts{entry: es[k], entryErr: errs[k]}
	}
	for k, i := range refIdx {
		facts[i].key = found[k]
	}
	return facts, nil
}

// retireRecord ends, with status to, a job record that an interrupted
// Accept may have left queued for a redelivered request that is now being
// refused, expired or cancelled, so it cannot run later (the job entry
// follows the record). First deliveries cannot have one: no round trip.
//
// A message that did not decode (poison) never ends a record: it may be a
// stranger's message naming another request, and a record is only ever
// made for a message that decoded.
func (b *Broker) retireRecord(ctx context.Context, d *Delivery, to wire.JobStatus, jerr *wire.JobError) error {
	if d.Deliveries <= 1 && !d.replayed || d.poison {
		return nil
	}
	u := jobs.Update{Error: jerr}
	if to == wire.JobFailed {
		u.ReasonCode = wire.Code(jerr.Code)
	}
	_, err := b.jobs.Transition(ctx, d.JobID, wire.JobQueued, to, u)
	if err != nil && !errors.Is(err, jobs.ErrNotFound) && !errors.Is(err, jobs.ErrConflict) {
		return err
	}
	return nil
}

// expire ends a request whose TTL lapsed while it waited: an expired job
// entry, the request entry marked expired, the message acked.
func (b *Broker) expire(ctx context.Context, d *Delivery) error {
	_, err := b.expireJob(ctx, d)
	return err
}

// expireJob is expire, returning the expired job entry's data.
func (b *Broker) expireJob(ctx context.Context, d *Delivery) (wire.JobData, error) {
	now := b.cfg.Clock.Now()
	jerr := &wire.JobError{Code: "expired", Message: "the request's ttl_seconds lapsed before it could be accepted"}
	if err := b.retireRecord(ctx, d, wire.JobExpired, jerr); err != nil {
		return wire.JobData{}, err
	}
	jd := b.jobDataFor(d, wire.JobExpired, jerr, now)
	if _, err := b.putJobEntry(ctx, jd); err != nil {
		return wire.JobData{}, err
	}
	err := b.store.Expire(ctx, d.EntryID, nil)
	if err != nil && !errors.Is(err, blackboard.ErrNotFound) && !errors.Is(err, blackboard.ErrConflict) {
		return wire.JobData{}, err
	}
	if err := b.ack(ctx, d, nil); err != nil {
		return wire.JobData{}, err
	}
	b.m.expired.Add(1)
	b.jobs.EmitFinished(ctx, jd)
	return jd, nil
}

// cancelQueued ends a request retracted before it started: a cancelled job
// entry and the message acked (the entry keeps its retracted status).
func (b *Broker) cancelQueued(ctx context.Context, d *Delivery, why string) error {
	_, err := b.cancelQueuedJob(ctx, d, why)
	return err
}

// cancelQueuedJob is cancelQueued, returning the cancelled job entry's data.
func (b *Broker) cancelQueuedJob(ctx context.Context, d *Delivery, why string) (wire.JobData, error) {
	jerr := &wire.JobError{Code: "cancelled", Message: why}
	if err := b.retireRecord(ctx, d, wire.JobCancelled, jerr); err != nil {
		return wire.JobData{}, err
	}
	jd := b.jobDataFor(d, wire.JobCancelled, jerr, b.cfg.Clock.Now())
	if _, err := b.putJobEntry(ctx, jd); err != nil {
		return wire.JobData{}, err
	}
	if err := b.ack(ctx, d, nil); err != nil {
		return wire.JobData{}, err
	}
	b.m.cancelled.Add(1)
	b.jobs.EmitFinished(ctx, jd)
	return jd, nil
}

// jobDataFor is the job data of a request that ends before acceptance.
func (b *Broker) jobDataFor(d *Delivery, st wire.JobStatus, jerr *wire.JobError, now time.Time) wire.JobData {
	sub, fin := d.Entry.Timestamp, epoch(now)
	jd := wire.JobData{
		JobID: d.JobID, RequestEntryID: d.EntryID, IdempotencyKey: d.Request.IdempotencyKey,
		Account: d.Request.Account, Priority: d.Request.Priority, Status: st, Error: jerr,
		SubmittedAt: &sub, FinishedAt: &fin,
	}
	if jd.Account == "" {
		jd.Account, jd.Priority = d.Entry.SourceModule, wire.DefaultPriority(int(d.Entry.Priority))
	}
	return jd
}

// consumeEntry marks the request entry consumed; an entry that is gone,
// already in another final status, or not a HASH at all is fine.
func (b *Broker) consumeEntry(ctx context.Context, id string) error {
	err := b.store.Consume(ctx, id, nil)
	if err != nil && !errors.Is(err, blackboard.ErrNotFound) && !errors.Is(err, blackboard.ErrConflict) && !isWrongType(err) {
		return err
	}
	return nil
}

// ack finishes the intake message (ack.lua): XACK, XDEL and, with dead
// fields, the dead letter, only while this consumer owns the message.
func (b *Broker) ack(ctx context.Context, d *Delivery, dead []any) error {
	args := append(b.ackArgs(d), dead...)
	n, err := scriptAck.Run(ctx, b.rdb, b.ackKeys(d), args...).Int()
	if err != nil {
		return fmt.Errorf("ack %s: %w", d.MessageID, err)
	}
	switch {
	case n == 1 && dead != nil:
		b.m.deadLettered.Add(1)
	case n == -2:
		return fmt.Errorf("ack %s: %w", d.MessageID, b.fencedErr())
	case n < 0:
		b.log.Info("request taken over by another consumer before it was finished here", "entry_id", d.EntryID)
	}
	return nil
}

// eventsStep watches the events stream for retracted requests: a queued
// one is removed from the inbox and cancelled; an accepted one gets
// cancel_requested on its job record and Config.OnCancel is called. An
// event is only a hint (any poster can write one): the request entry's own
// status is read before anything is cancelled. With block > 0 it waits up
// to block for events. The first call starts at the end of the stream. It
// returns how many events it read from the stream (of any type) and how
// many retractions it acted on.
func (b *Broker) eventsStep(ctx context.Context, block time.Duration) (read, acted int, err error) {
	b.evMu.Lock()
	defer b.evMu.Unlock()
	if b.evCursor == "" {
		b.evCursor = "$"
	}
	evs, cur, read, err := b.store.EventsScanned(ctx, b.evCursor, blackboard.EventEntryUpdated, eventsBatch, block)
	if err != nil {
		if ctx.Err() != nil {
			return 0, 0, nil
		}
		return 0, 0, err
	}
	b.evCursor = cur
	var errs []error
	for _, ev := range evs {
		// Every consume, claim and job entry change is an updated event
		// too: only a payload that names the retracted status can be a
		// retraction, so the others are not decoded.
		if !bytes.Contains(ev.Payload, retractedJSON) || !bytes.Contains(ev.Payload, requestTopicJSON) {
			continue
		}
		var p struct {
			EntryID string          `json:"entry_id"`
			Topic   string          `json:"topic"`
			Field   string          `json:"field"`
			New     json.RawMessage `json:"new"`
		}
		if json.Unmarshal(ev.Payload, &p) != nil || p.Topic != blackboard.RequestTopic || p.Field != "status" {
			continue
		}
		var st string
		if json.Unmarshal(p.New, &st) != nil || st != string(blackboard.StatusRetracted) {
			continue
		}
		ok, err := b.retracted(ctx, p.EntryID)
		if ok {
			acted++
		}
		errs = append(errs, err)
	}
	return read, acted, errors.Join(errs...)
}

// The JSON strings a retraction's updated event carries (its new status and
// its topic), looked for before its payload is decoded.
var (
	retractedJSON    = []byte(`"` + string(blackboard.StatusRetracted) + `"`)
	requestTopicJSON = []byte(`"` + blackboard.RequestTopic + `"`)
)

// parseCounted parses {{id, fields, deliveries}, ...} from own.lua and
// claim.lua, read from lane l.
func parseCounted(l *lane, v any) []message {
	rows, _ := v.([]any)
	out := make([]message, 0, len(rows))
	for _, r := range rows {
		t, _ := r.([]any)
		if len(t) != 3 {
			continue
		}
		id, _ := t[0].(string)
		n, _ := t[2].(int64)
		out = append(out, message{lane: l.prio, src: l, id: id, fields: parseFields(t[1]), deliveries: int(n)})
	}
	return out
}

// parseFields reads the fields the broker needs from a flat {field, value,
// ...} reply.
func parseFields(v any) msgFields {
	a, _ := v.([]any)
	var f msgFields
	for i := 0; i+1 < len(a); i += 2 {
		k, _ := a[i].(string)
		s, _ := a[i+1].(string)
		f.set(k, s)
	}
	return f
}

func epoch(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

func epochTime(s float64) time.Time {
	sec := int64(s)
	return time.Unix(sec, int64((s-float64(sec))*1e9)).UTC()
}

func formatEpoch(t time.Time) string { return formatFloat(epoch(t)) }

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

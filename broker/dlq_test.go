package broker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/wire"
)

// dlqFields reads the raw fields of every dead letter.
func (bd *board) dlqFields(t testing.TB) []map[string]any {
	t.Helper()
	msgs, err := bd.rdb.XRange(context.Background(), bd.keys.DLQ(), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, m := range msgs {
		out = append(out, m.Values)
	}
	return out
}

// TestDeadLetterTruncated: a refused entry over DLQEntryBytes keeps only
// its first DLQEntryBytes bytes, its size and its sha256; it cannot be
// replayed, while a complete dead letter still can.
func TestDeadLetterTruncated(t *testing.T) {
	bd := newBoard(t)
	ctx := t.Context()
	b := bd.broker(t, Config{DLQEntryBytes: 1024})
	big := bd.post(t, "m", `{"command":["x"],"bogus":"`+strings.Repeat("a", 50<<10)+`"}`)
	small := bd.post(t, "m", `{"command":["x"],"bogus":1}`)
	feed(t, b)

	raw := bd.dlqFields(t)
	if len(raw) != 2 {
		t.Fatalf("%d dead letters", len(raw))
	}
	bigEntry, _ := raw[0]["entry"].(string)
	if len(bigEntry) != 1024 || raw[0]["truncated"] != "1" {
		t.Errorf("big dead letter keeps %d bytes of its entry, truncated %v", len(bigEntry), raw[0]["truncated"])
	}
	dls := bd.deadLetters(t)
	if dls[0].EntryID != big || !dls[0].Truncated || dls[0].EntryBytes <= 50<<10 ||
		!strings.HasPrefix(dls[0].EntryDigest, "sha256:") || len(dls[0].EntryDigest) != 7+64 {
		t.Errorf("big dead letter %+v", dls[0])
	}
	if dls[1].EntryID != small || dls[1].Truncated || !json.Valid(dls[1].Entry) {
		t.Errorf("small dead letter %+v", dls[1])
	}
	// The digest is the whole entry's: the small one's can be checked.
	sum := sha256.Sum256([]byte(raw[1]["entry"].(string)))
	if want := "sha256:" + hex.EncodeToString(sum[:]); dls[1].EntryDigest != want {
		t.Errorf("small digest %q, want %q", dls[1].EntryDigest, want)
	}

	insp := b.Inspector()
	if _, err := insp.DLQReplay(ctx, dls[0].ID); !errors.Is(err, ErrTruncated) {
		t.Errorf("replay of the truncated dead letter: %v, want ErrTruncated", err)
	}
	if _, err := insp.DLQReplay(ctx, dls[1].ID); err != nil {
		t.Errorf("replay of the complete dead letter: %v", err)
	}
	if n, err := insp.DLQReplayAll(ctx); err != nil || n != 0 {
		t.Errorf("DLQReplayAll = %d, %v (the truncated one is skipped)", n, err)
	}
}

// TestDeadLetterTrimmed: the dead-letter stream keeps at most DLQMaxLen
// dead letters and none older than DLQMaxAge.
func TestDeadLetterTrimmed(t *testing.T) {
	bd := newBoard(t)
	b := bd.broker(t, Config{DLQMaxLen: 5, DLQMaxAge: time.Hour})
	for range 8 {
		bd.post(t, "m", `{"command":["x"],"bogus":1}`)
	}
	feed(t, b)
	if n := len(bd.dlqFields(t)); n != 5 {
		t.Errorf("%d dead letters, want 5 (DLQMaxLen)", n)
	}
	// Two hours on, the next dead letter drops every older one. (Stream ids
	// come from Redis's clock, which the fake clock runs ahead of.)
	bd.clk.Advance(2 * time.Hour)
	last := bd.post(t, "m", `{"command":["x"],"bogus":2}`)
	feed(t, b)
	if dls := bd.deadLetters(t); len(dls) != 1 || dls[0].EntryID != last {
		t.Errorf("dead letters after two hours: %+v, want only the new one", dls)
	}
}

// TestDeadLetterBeforeRejection: the dead letter is written before the job
// entry says rejected, so a poster who sees the rejection finds the dead
// letter; a crash in between (here: a failing write) never leaves a
// rejected job without its dead letter, and the redelivery writes the dead
// letter once.
func TestDeadLetterBeforeRejection(t *testing.T) {
	bd := newBoard(t)
	ctx := t.Context()
	b := bd.broker(t, Config{})
	id := bd.post(t, "m", `{"command":["x"],"bogus":1}`)

	// The dead-letter stream cannot be written: nothing may say rejected.
	if err := bd.rdb.Set(ctx, bd.keys.DLQ(), "in the way", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.feedStep(ctx, 0); err == nil {
		t.Fatal("feed succeeded with a broken dead-letter stream")
	}
	if jd, ok := bd.jobEntry(t, id); ok {
		t.Errorf("job entry %s without a dead letter", jd.Status)
	}

	// The dead letter is written, then the job entry fails: after a restart
	// the refusal completes with exactly one dead letter.
	if err := bd.rdb.Del(ctx, bd.keys.DLQ()).Err(); err != nil {
		t.Fatal(err)
	}
	topic := bd.keys.Topic(wire.TopicJob)
	if err := bd.rdb.Set(ctx, topic, "in the way", 0).Err(); err != nil {
		t.Fatal(err)
	}
	b2 := bd.broker(t, Config{}) // same consumer: re-reads its own pending message
	if _, err := b2.feedStep(ctx, 0); err == nil {
		t.Fatal("feed succeeded with a broken job topic")
	}
	if err := bd.rdb.Del(ctx, topic).Err(); err != nil {
		t.Fatal(err)
	}
	b3 := bd.broker(t, Config{})
	feed(t, b3)
	if dls := bd.deadLetters(t); len(dls) != 1 || dls[0].EntryID != id {
		t.Errorf("dead letters %+v, want one", dls)
	}
	if jd, ok := bd.jobEntry(t, id); !ok || jd.Status != wire.JobRejected {
		t.Errorf("job entry %+v %v", jd, ok)
	}
	if l, p := bd.laneTotals(t); l != 0 || p != 0 {
		t.Errorf("lanes hold %d, %d pending", l, p)
	}
	if n, _ := bd.rdb.HLen(ctx, bd.keys.DLQWritten()).Result(); n != 0 {
		t.Errorf("%d dead-letter marks left", n)
	}
}

// TestNonHashEntry: a request whose entry key is not a HASH is
// dead-lettered at once with reason entry_wrong_type, not retried forever.
func TestNonHashEntry(t *testing.T) {
	for _, batch := range []bool{false, true} {
		bd := newBoard(t)
		ctx := t.Context()
		b := bd.broker(t, Config{})
		id := bd.post(t, "m", okData)
		if err := bd.rdb.Del(ctx, bd.keys.Entry(id)).Err(); err != nil {
			t.Fatal(err)
		}
		if err := bd.rdb.RPush(ctx, bd.keys.Entry(id), "not", "a", "hash").Err(); err != nil {
			t.Fatal(err)
		}
		feed(t, b)
		var err error
		if batch {
			ds, nerr := b.NextBatch(ctx, 10)
			if nerr != nil || len(ds) != 1 {
				t.Fatalf("NextBatch = %d, %v", len(ds), nerr)
			}
			err = b.AcceptBatch(ctx, ds)[0].Err
		} else {
			nctx, cancel := context.WithTimeout(ctx, time.Second)
			d, nerr := b.Next(nctx)
			cancel()
			if nerr == nil {
				_, _, err = b.Accept(ctx, d)
			} else {
				err = nerr
			}
		}
		if err != nil && !batch {
			t.Logf("Next/Accept: %v", err) // refused: Next finds nothing more to hand out
		}
		if b.inbox.Len() != 0 {
			t.Errorf("batch %v: the request is still held", batch)
		}
		dls := bd.deadLetters(t)
		if len(dls) != 1 || dls[0].EntryID != id || dls[0].Reason != ReasonEntryWrongType ||
			dls[0].Code != string(wire.CodeInvalidValue) {
			t.Fatalf("batch %v: dead letters %+v", batch, dls)
		}
		if jd, ok := bd.jobEntry(t, id); !ok || jd.Status != wire.JobRejected {
			t.Errorf("batch %v: job entry %+v %v", batch, jd, ok)
		}
		if _, err := b.jobs.Get(ctx, wire.JobID(id)); !errors.Is(err, jobs.ErrNotFound) {
			t.Errorf("batch %v: job record %v", batch, err)
		}
		if l, p := bd.laneTotals(t); l != 0 || p != 0 {
			t.Errorf("batch %v: lanes hold %d, %d pending", batch, l, p)
		}
		if typ, _ := bd.rdb.Type(ctx, bd.keys.Entry(id)).Result(); typ != "list" {
			t.Errorf("the foreign key was touched: %s", typ)
		}
	}
}

// TestDLQReplayInBatches: replaying the dead letters in batches (what
// `adapter inbox dlq replay --all` does, to show its progress) replays
// each once, says how many it looked at and where to go on, and reaches
// the end; over HTTP, count asks for one batch.
func TestDLQReplayInBatches(t *testing.T) {
	bd := newBoard(t)
	b := bd.broker(t, Config{})
	ctx := t.Context()
	insp := b.Inspector()
	var ids []string
	for range 5 {
		ids = append(ids, bd.post(t, "m", okData))
	}
	feed(t, b)
	for _, id := range ids {
		if err := insp.Drop(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	total, after := 0, ""
	for round := 0; ; round++ {
		n, looked, next, err := insp.DLQReplayBatch(ctx, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		total += n
		if want := min(2, 5-2*round); looked != want || n != want {
			t.Fatalf("batch %d: replayed %d, looked at %d; want %d", round, n, looked, want)
		}
		if looked < 2 {
			break
		}
		after = next
	}
	if total != 5 {
		t.Errorf("replayed %d in batches, want 5", total)
	}
	if dls, _ := insp.DLQList(ctx, "", 0); len(dls) != 0 {
		t.Errorf("%d dead letters left", len(dls))
	}

	// Over HTTP, one batch of 1 of the two dropped again.
	feed(t, b)
	for _, id := range ids[:2] {
		if err := insp.Drop(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(b.Handler())
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/api/v1/inbox/dlq/replay?count=1", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	// No token configured: changes are refused (403).
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("batch replay without a configured token: %s %v", resp.Status, got)
	}
	b2 := bd.broker(t, Config{Consumer: "tok", OperatorToken: "t"})
	srv2 := httptest.NewServer(b2.Handler())
	defer srv2.Close()
	req, _ := http.NewRequest("POST", srv2.URL+"/api/v1/inbox/dlq/replay?count=1", nil)
	req.Header.Set("Authorization", "Bearer t")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got = nil
	_ = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if resp.StatusCode != 200 || got["replayed"] != 1.0 || got["looked_at"] != 1.0 || got["done"] != false || got["next"] == "" {
		t.Errorf("one batch of 1 over HTTP: %s %v", resp.Status, got)
	}
	if n, err := insp.DLQReplayAll(ctx); err != nil || n != 1 {
		t.Errorf("DLQReplayAll = %d, %v; want the 1 left", n, err)
	}
}

package broker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/wire"
)

// TestOversizeMessage: an intake message with a field over MaxMessageBytes
// is never held whole: the read keeps its first bytes, its size and its
// sha256, and it is dead-lettered payload_too_large; the messages after it
// in the same read are read as usual.
func TestOversizeMessage(t *testing.T) {
	bd := newBoard(t)
	ctx := t.Context()
	b := bd.broker(t, Config{MaxMessageBytes: 64 << 10, DLQEntryBytes: 1024})
	id := "0123456789abcdef0123456789abcdef"
	huge := `{"entry_id":"` + id + `","data":"` + strings.Repeat("x", 4<<20) + `"}`
	if err := bd.rdb.XAdd(ctx, &redis.XAddArgs{Stream: bd.keys.Inbox(4),
		Values: []any{"v", "1", "entry_id", id, "entry", huge}}).Err(); err != nil {
		t.Fatal(err)
	}
	after := bd.post(t, "m", okData)
	feed(t, b)

	for len(b.replyBufs) > 0 {
		if w := <-b.replyBufs; cap(w.b) >= 1<<20 {
			t.Errorf("a reply buffer grew to %d bytes: the oversized message was held", cap(w.b))
		}
	}
	dls := bd.deadLetters(t)
	if len(dls) != 1 {
		t.Fatalf("dead letters %+v", dls)
	}
	sum := sha256.Sum256([]byte(huge))
	dl := dls[0]
	if dl.EntryID != id || dl.Code != string(wire.CodePayloadTooLarge) || !dl.Truncated ||
		dl.EntryBytes != len(huge) || dl.EntryDigest != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Errorf("dead letter %+v", dl)
	}
	raw := bd.dlqFields(t)[0]["entry"].(string)
	if raw != huge[:1024] {
		t.Errorf("dead letter keeps %q…, want the entry's first 1024 bytes", raw[:min(len(raw), 40)])
	}
	if _, ok := b.inbox.Get(after); !ok {
		t.Errorf("the request after the oversized message was not read")
	}
}

// TestReadCap: one read takes at most MaxReadBytes/MaxMessageBytes
// messages.
func TestReadCap(t *testing.T) {
	bd := newBoard(t)
	b := bd.broker(t, Config{MaxMessageBytes: 1000, MaxReadBytes: 10000})
	for range 25 { // on the shared lane, which every broker reads from the start
		e := blackboard.NewEntry(blackboard.RequestTopic, "m", []byte(okData))
		e.ID, e.Timestamp, e.Status = blackboard.NewID(), 1767225600, blackboard.StatusActive
		js, err := e.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if err := bd.rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: bd.keys.Inbox(4),
			Values: []any{"v", "1", "entry_id", e.ID, "entry", string(js)}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	msgs, err := b.readNew(context.Background(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 10 {
		t.Errorf("one read took %d messages, want 10", len(msgs))
	}
}

// TestOversizePendingMessage: an oversized message re-read from this
// consumer's pending list (own.lua; claim.lua alike) is cut in Redis: only
// its start, size and sha1 travel, and it is dead-lettered
// payload_too_large.
func TestOversizePendingMessage(t *testing.T) {
	bd := newBoard(t)
	ctx := t.Context()
	b := bd.broker(t, Config{MaxMessageBytes: 64 << 10, DLQEntryBytes: 1024})
	id := "0123456789abcdef0123456789abcdef"
	huge := `{"entry_id":"` + id + `","data":"` + strings.Repeat("y", 1<<20) + `"}`
	if err := bd.rdb.XAdd(ctx, &redis.XAddArgs{Stream: bd.keys.Inbox(4),
		Values: []any{"v", "1", "entry_id", id, "entry", huge}}).Err(); err != nil {
		t.Fatal(err)
	}
	// Delivered to b1, which died before deciding.
	if err := bd.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "compute-broker", Consumer: "b1",
		Streams: []string{bd.keys.Inbox(4), ">"}, Count: 1}).Err(); err != nil {
		t.Fatal(err)
	}
	_ = b
	b2 := bd.broker(t, Config{MaxMessageBytes: 64 << 10, DLQEntryBytes: 1024}) // b1 again: re-reads its own
	feed(t, b2)
	dls := bd.deadLetters(t)
	if len(dls) != 1 {
		t.Fatalf("dead letters %+v", dls)
	}
	dl := dls[0]
	if dl.Code != string(wire.CodePayloadTooLarge) || !dl.Truncated || dl.EntryBytes != len(huge) ||
		!strings.HasPrefix(dl.EntryDigest, "sha1:") {
		t.Errorf("dead letter %+v", dl)
	}
	if raw := bd.dlqFields(t)[0]["entry"].(string); raw != huge[:1024] {
		t.Errorf("dead letter keeps %d bytes, want the first 1024", len(raw))
	}
}

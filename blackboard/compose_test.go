package blackboard

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
)

// TestPostStep: a script of another package composed with LuaLib posts an
// entry through post_one exactly as Post does (HASH, indexes, intake lane,
// added event, counters), and refuses a taken id without writing; its
// consume_entry is Consume's status change. Posted evicts as Post does.
func TestPostStep(t *testing.T) {
	v := newEnv(t, Config{MaxEntries: 3})
	id1, id2, id3, id4 := NewID(), NewID(), NewID(), NewID()
	ctx := context.Background()
	post := redis.NewScript(LuaLib() + "local n = post_one(1, 1)\nif not n then return -1 end\nreturn n")
	consume := redis.NewScript(LuaLib() + "local c, st = consume_entry(KEYS[1], KEYS[2], ARGV[1], KEYS[3], ARGV[2], ARGV[3], ARGV[4])\nreturn {c, st or ''}")

	byPost := &Entry{ID: id1, Topic: RequestTopic, SourceModule: "m", Data: []byte(`{"command":["x"]}`)}
	if _, err := v.s.Post(ctx, byPost); err != nil {
		t.Fatal(err)
	}
	byStep := &Entry{ID: id2, Topic: RequestTopic, SourceModule: "m", Data: []byte(`{"command":["x"]}`)}
	keys, args, err := v.s.PostStep(nil, nil, byStep, v.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != PostStepKeys || len(args) != PostStepArgs {
		t.Fatalf("PostStep: %d keys, %d args; want %d, %d", len(keys), len(args), PostStepKeys, PostStepArgs)
	}
	n, err := post.Run(ctx, v.rdb, keys, args...).Int64()
	if err != nil || n != 2 {
		t.Fatalf("post_one = %d, %v; want 2 (the entry count)", n, err)
	}
	if n, err := post.Run(ctx, v.rdb, keys, args...).Int64(); err != nil || n != -1 {
		t.Fatalf("post_one of a taken id = %d, %v; want false", n, err)
	}
	state := func(id string) map[string]any {
		h, err := v.rdb.HGetAll(ctx, v.k.Entry(id)).Result()
		if err != nil {
			t.Fatal(err)
		}
		delete(h, "entry_id")
		st := map[string]any{"hash": h}
		for _, k := range []string{v.k.All(), v.k.Topic(RequestTopic), v.k.Source("m"), v.k.Prio(Low)} {
			_, err := v.rdb.ZScore(ctx, k, id).Result()
			st["in "+k] = err == nil
		}
		return st
	}
	if diff := cmp.Diff(state(id1), state(id2)); diff != "" {
		t.Errorf("post_one differs from Post (-Post +post_one):\n%s", diff)
	}
	evs := v.events(t, EventEntryAdded)
	if len(evs) != 2 || evs[1].Payload != `{"entry_id":"`+id2+`","topic":"compute.request","source_module":"m","priority":"LOW"}` {
		t.Errorf("added events %+v", evs)
	}
	if n, _ := v.rdb.XLen(ctx, v.k.ModuleInbox("m", RequestLane(*byStep))).Result(); n != 2 {
		t.Errorf("intake lane holds %d, want 2", n)
	}
	if n, _ := v.rdb.HGet(ctx, v.k.Stats(), "total_posted").Int(); n != 2 {
		t.Errorf("total_posted %d, want 2", n)
	}

	ck := []string{v.k.Entry(id2), v.k.Expiry(), v.k.Events()}
	ca := []any{id2, 10000, "0123456789abcdef01234567", formatFloat(epoch(v.clk.Now()))}
	for i, want := range []string{"[1 ]", "[0 ]"} {
		r, err := consume.Run(ctx, v.rdb, ck, ca...).Slice()
		if got := cmp.Diff(want, fmtReply(r)); err != nil || got != "" {
			t.Errorf("consume_entry #%d = %v, %v; want %s", i+1, r, err, want)
		}
	}
	if e, _ := v.s.Get(ctx, id2); e.Status != StatusConsumed {
		t.Errorf("status %s after consume_entry", e.Status)
	}

	// Over capacity (3): Posted evicts the oldest, sparing the new one.
	for _, id := range []string{id3, id4} {
		keys, args, err := v.s.PostStep(nil, nil, &Entry{ID: id, Topic: "t", SourceModule: "m"}, v.clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		n, err := post.Run(ctx, v.rdb, keys, args...).Int64()
		if err != nil {
			t.Fatal(err)
		}
		v.s.Posted(ctx, n, id)
	}
	if n, _ := v.rdb.ZCard(ctx, v.k.All()).Result(); n != 3 {
		t.Errorf("%d entries after Posted, want the capacity, 3", n)
	}
}

func fmtReply(r []any) string {
	out := "["
	for i, x := range r {
		if i > 0 {
			out += " "
		}
		switch x := x.(type) {
		case int64:
			out += formatFloat(float64(x))
		case string:
			out += x
		}
	}
	return out + "]"
}

// TestEncodeFastPaths: encode's hand-built JSON is what marshal and
// json.Compact write.
func TestEncodeFastPaths(t *testing.T) {
	strs := []string{"", "a", "compute", "a b<>&", "é", "a\"b", "a\\b", "tab\t", "\u2028", "\x7f"}
	for _, a := range strs {
		for _, b := range strs {
			tags := []string{a, b}
			want, _ := marshal(tags)
			if got, ok := stringsJSON(tags); ok && got != string(want) {
				t.Errorf("stringsJSON(%q) = %s, want %s", tags, got, want)
			}
			m := map[string]any{a: b, "z" + b: a}
			want, _ = marshal(m)
			if got, ok := stringMapJSON(m); ok && got != string(want) {
				t.Errorf("stringMapJSON(%q) = %s, want %s", m, got, want)
			}
		}
	}
	if got, ok := stringMapJSON(nil); !ok || got != "{}" {
		t.Errorf("stringMapJSON(nil) = %s, %v", got, ok)
	}
	if _, ok := stringMapJSON(map[string]any{"n": 1}); ok {
		t.Error("stringMapJSON took a number")
	}
	for _, d := range []string{`{"a":1}`, `{"a": 1}`, `{"a":" x "}`, `{"a":"\" "}`, `{"a":"\\"," b":2}`, "[1,\n2]", `{"a":"\\\" "}`} {
		var buf bytes.Buffer
		if err := json.Compact(&buf, []byte(d)); err != nil {
			t.Fatal(err)
		}
		if compactJSON([]byte(d)) != (buf.String() == d) {
			t.Errorf("compactJSON(%s) = %v, json.Compact gives %s", d, compactJSON([]byte(d)), buf.String())
		}
	}
}

// TestAddedJSON: the added event's hand-built payload is marshal's.
func TestAddedJSON(t *testing.T) {
	for _, p := range []addedPayload{
		{"0123456789abcdef0123456789abcdef", "compute.request", "m", "NORMAL"},
		{"m:0123456789abcdef0123456789abcdef", "a<b>&c", "mod-1", "LOW"},
		{"x", "tópico", "m\"q", "HIGH"},
	} {
		want, _ := marshal(p)
		if got, err := addedJSON(p); err != nil || got != string(want) {
			t.Errorf("addedJSON(%+v) = %s, %v; want %s", p, got, err, want)
		}
	}
}

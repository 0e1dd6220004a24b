package broker

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestParseStreamReply: the raw XREADGROUP reader gives what the generic
// reply parser did, in RESP2 and RESP3, for nulls, deleted messages,
// repeated and unknown fields, and error replies.
func TestParseStreamReply(t *testing.T) {
	msg := func(id string, fields ...string) string {
		if fields == nil {
			return "*2\r\n$" + itoa(len(id)) + "\r\n" + id + "\r\n*-1\r\n"
		}
		s := "*2\r\n$" + itoa(len(id)) + "\r\n" + id + "\r\n*" + itoa(len(fields)) + "\r\n"
		for _, f := range fields {
			s += "$" + itoa(len(f)) + "\r\n" + f + "\r\n"
		}
		return s
	}
	body := "*3\r\n" +
		msg("1-0", "v", "1", "entry_id", "e1", "topic", "compute.request", "entry", `{"a":"b\r\n"}`) +
		msg("2-0") + // deleted
		msg("3-1", "entry", "x", "v", "2", "entry", "y", "replayed", "1", "entry_id", "e3")
	want := []message{
		{lane: 4, id: "1-0", deliveries: 1, fields: msgFields{v: "1", entryID: "e1", entry: `{"a":"b\r\n"}`}},
		{lane: 4, id: "3-1", deliveries: 1, fields: msgFields{v: "2", entryID: "e3", entry: "y", replayed: "1"}},
	}
	for name, raw := range map[string]string{
		"resp2": "*1\r\n*2\r\n$6\r\nlane:4\r\n" + body,
		"resp3": "%1\r\n$6\r\nlane:4\r\n" + strings.Replace(body, "*-1\r\n", "_\r\n", 1),
	} {
		got, err := parseStreamReply([]byte(raw), 4, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if diff := cmp.Diff(want, got, cmp.AllowUnexported(message{}, msgFields{})); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
	for _, null := range []string{"*-1\r\n", "_\r\n"} {
		if got, err := parseStreamReply([]byte(null), 4, nil); err != nil || len(got) != 0 {
			t.Errorf("null reply %q: %v, %v", null, got, err)
		}
	}
	_, err := parseStreamReply([]byte("-NOGROUP No such key or consumer group\r\n"), 4, nil)
	if !isNoGroup(err) {
		t.Errorf("error reply: %v", err)
	}
	for _, bad := range []string{"", "*1\r\n", "*1\r\n*2\r\n$6\r\nlane:4\r\n*1\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nv\r\n$9\r\n1\r\n"} {
		if _, err := parseStreamReply([]byte(bad), 4, nil); err == nil {
			t.Errorf("truncated reply %q: no error", bad)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

package broker

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Reading XREADGROUP replies raw. go-redis's generic reply parser boxes
// every bulk string of a reply in an interface (two allocations per field,
// plus a slice per message and per field list): about 27 allocations per
// intake message, most of them for fields the broker never looks at (topic,
// priority, timestamp). readNew instead has the reply streamed, as RESP
// bytes, into a reused buffer (redis.RawWriteToCmd; see replyBuf), and parseStreamReply walks it: each message becomes one
// string (its own span of the reply, so a request held in the inbox keeps
// only its own message alive), and the message id and the fields the broker
// reads are substrings of it.

// replyBuf is a buffer a raw reply is streamed into. go-redis copies each
// bulk string with io.CopyN, which hands ReadFrom an *io.LimitedReader:
// ReadFrom reads exactly that many bytes into the buffer, growing it only
// when the reply outgrows it (bytes.Buffer would keep 512 bytes of
// headroom per string and regrow).
//
// A replyBuf with a limit never holds a bulk string longer than limit, nor
// more than budget bytes in all: such a string (an oversized message
// field, or one past the read's byte budget) is streamed through sha256
// and replaced by an oversize marker (see oversizeMarker) followed by its
// first prefix bytes, so an oversized message never lands in memory whole.
// The RESP stays well formed (its header is rewritten); span maps the
// offsets go-redis reports, which count the original bytes, to the
// buffer's.
type replyBuf struct {
	b []byte

	limit, budget, prefix int      // 0: no limit, no budget
	pending               int      // > 0: the next bulk (this many bytes) is replaced
	sums                  []shrink // where the buffer fell behind the reported bytes
	reported              int64    // bytes go-redis has handed over
}

// shrink records that, from reported offset at on, the buffer holds delta
// fewer bytes than go-redis reported.
type shrink struct{ at, delta int64 }

// capped sets w's limits for one read and returns it.
func (w *replyBuf) capped(limit, budget, prefix int) *replyBuf {
	w.limit, w.budget, w.prefix = limit, budget, prefix
	w.pending, w.sums, w.reported = 0, w.sums[:0], 0
	return w
}

// span maps a reply's reported offset and length to buffer offsets.
func (w *replyBuf) span(off, n int) (lo, hi int) {
	at := func(r int64) int {
		d := int64(0)
		for _, s := range w.sums {
			if s.at <= r {
				d = s.delta
			}
		}
		return int(r - d)
	}
	return at(int64(off)), at(int64(off + n))
}

// oversizeMarker starts a bulk string that stands for a longer one:
// marker, the size (20 digits), " sha256:<hex>\n", then a prefix.
const oversizeMarker = "\x00computeboard:oversize "

const oversizeHead = len(oversizeMarker) + 20 + len(" sha256:") + 64 + 1

// parseOversize reads a bulk string written by a capped replyBuf: the
// original size and digest, and the prefix kept.
// The reads through own.lua and claim.lua (pending messages re-read or
// taken over) write the same marker in Lua, with "sha1:<hex>" (Redis's Lua
// has no sha256).
func parseOversize(s string) (size int, sum, prefix string, ok bool) {
	rest, ok := strings.CutPrefix(s, oversizeMarker)
	if !ok || len(rest) < 22 || rest[20] != ' ' {
		return 0, "", "", false
	}
	n, err := strconv.ParseUint(rest[:20], 10, 63)
	sum, prefix, found := strings.Cut(rest[21:], "\n")
	if err != nil || !found || !strings.HasPrefix(sum, "sha") {
		return 0, "", "", false
	}
	return int(n), sum, prefix, true
}

// grow makes room for n more bytes, doubling (append's growth, 1.25x for
// large slices, would copy a multi-megabyte reply many times over).
func (w *replyBuf) grow(n int) {
	if cap(w.b)-len(w.b) >= n {
		return
	}
	b := make([]byte, len(w.b), max(2*cap(w.b), len(w.b)+n))
	copy(b, w.b)
	w.b = b
}

func (w *replyBuf) Write(p []byte) (int, error) {
	w.reported += int64(len(p))
	if w.limit > 0 && len(p) > 1 && p[0] == '$' {
		// A bulk string's header: over the limit or the budget, it is
		// replaced (the body follows through ReadFrom).
		if n, err := strconv.Atoi(string(p[1:])); err == nil && n > 0 &&
			(n > w.limit || (w.budget > 0 && len(w.b)+n > w.budget)) {
			w.pending = n
			head := "$" + strconv.Itoa(oversizeHead+min(n, w.prefix))
			w.grow(len(head))
			w.b = append(w.b, head...)
			w.shrunk(int64(len(p) - len(head)))
			return len(p), nil
		}
	}
	w.grow(len(p))
	w.b = append(w.b, p...)
	return len(p), nil
}

// shrunk notes that the buffer fell d more bytes behind the reported ones.
func (w *replyBuf) shrunk(d int64) {
	prev := int64(0)
	if len(w.sums) > 0 {
		prev = w.sums[len(w.sums)-1].delta
	}
	w.sums = append(w.sums, shrink{at: w.reported, delta: prev + d})
}

// readOversize streams a replaced bulk body (n bytes and CRLF) from l:
// the marker with size and sha256, the first prefix bytes, CRLF.
func (w *replyBuf) readOversize(l *io.LimitedReader) (int64, error) {
	n := w.pending
	w.pending = 0
	keep := min(n, w.prefix)
	w.grow(oversizeHead + keep + 2)
	start := len(w.b)
	w.b = append(w.b, oversizeMarker...)
	w.b = fmt.Appendf(w.b, "%020d sha256:", n)
	sumAt := len(w.b)
	w.b = append(w.b, make([]byte, 64)...)
	w.b = append(w.b, '\n')
	h := sha256.New()
	body := w.b[len(w.b) : len(w.b)+keep]
	got, err := io.ReadFull(l, body)
	h.Write(body[:got])
	w.b = w.b[:len(w.b)+got]
	total := int64(got)
	if err == nil {
		m, cerr := io.CopyN(h, l, int64(n-keep))
		total += m
		err = cerr
	}
	if err == nil {
		var crlf [2]byte
		m, cerr := io.ReadFull(l, crlf[:])
		total += int64(m)
		err = cerr
	}
	hex.Encode(w.b[sumAt:sumAt+64], h.Sum(nil))
	w.b = append(w.b, '\r', '\n')
	w.reported += total
	w.shrunk(total - int64(len(w.b)-start))
	return total, err
}

func (w *replyBuf) ReadFrom(r io.Reader) (int64, error) {
	if l, ok := r.(*io.LimitedReader); ok && w.pending > 0 && l.N == int64(w.pending)+2 {
		return w.readOversize(l)
	}
	if l, ok := r.(*io.LimitedReader); ok && l.N >= 0 && l.N < 1<<30 {
		w.reported += l.N // what go-redis counts (ReadFull below reads it all or fails)
		n := int(l.N)
		w.grow(n)
		got, err := io.ReadFull(l, w.b[len(w.b):len(w.b)+n])
		w.b = w.b[:len(w.b)+got]
		return int64(got), err
	}
	var total int64
	for {
		w.grow(4096)
		n, err := r.Read(w.b[len(w.b):cap(w.b)])
		w.b = w.b[:len(w.b)+n]
		total += int64(n)
		w.reported += int64(n)
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// replyBufs keeps a few replyBufs for reuse (a buffered channel rather than
// a sync.Pool, which the frequent GCs of a busy intake would empty). One
// read (readNew) streams all its replies into one buffer, so at most a
// read's worth of reply bytes (≈ the inbox's free room times a message's
// size) is kept per buffer.
type replyBufs chan *replyBuf

// maxKeptReply bounds the buffers kept (a larger read's is left to the GC).
const maxKeptReply = 32 << 20

func (p replyBufs) get() *replyBuf {
	select {
	case w := <-p:
		return w
	default:
		return &replyBuf{b: make([]byte, 0, 64<<10)}
	}
}

func (p replyBufs) put(w *replyBuf) {
	if cap(w.b) > maxKeptReply {
		return
	}
	w.b = w.b[:0]
	select {
	case p <- w:
	default:
	}
}

// respReader walks one RESP2/RESP3 reply.
type respReader struct {
	b   []byte
	pos int
}

var errBadReply = errors.New("malformed reply")

// header reads a type byte and its line (without CRLF).
func (r *respReader) header() (byte, []byte, error) {
	if r.pos >= len(r.b) {
		return 0, nil, errBadReply
	}
	i := bytes.Index(r.b[r.pos:], []byte("\r\n"))
	if i < 1 {
		return 0, nil, errBadReply
	}
	t, line := r.b[r.pos], r.b[r.pos+1:r.pos+i]
	r.pos += i + 2
	return t, line, nil
}

// length parses a header's count; -1 for a null.
func length(line []byte) (int, error) {
	n, err := strconv.Atoi(string(line)) // no allocation: the conversion does not escape
	if err != nil || n < -1 {
		return 0, errBadReply
	}
	return n, nil
}

// aggregate reads an array (or set, push) or map header: its element count
// (a map's counts its keys and values), or -1 for a null. An error reply
// is returned as an error.
func (r *respReader) aggregate() (int, error) {
	t, line, err := r.header()
	if err != nil {
		return 0, err
	}
	switch t {
	case '*', '~', '>':
		return length(line)
	case '%':
		n, err := length(line)
		return 2 * n, err
	case '_':
		return -1, nil
	case '-', '!':
		return 0, errors.New(string(line))
	}
	return 0, errBadReply
}

// bulk reads a string (bulk or simple) and returns its span in r.b;
// null reports a null.
func (r *respReader) bulk() (start, end int, null bool, err error) {
	t, line, err := r.header()
	if err != nil {
		return 0, 0, false, err
	}
	switch t {
	case '$', '=':
		n, err := length(line)
		if err != nil {
			return 0, 0, false, err
		}
		if n < 0 {
			return 0, 0, true, nil
		}
		start, end = r.pos, r.pos+n
		if end+2 > len(r.b) {
			return 0, 0, false, errBadReply
		}
		r.pos = end + 2
		return start, end, false, nil
	case '+':
		return r.pos - 2 - len(line), r.pos - 2, false, nil
	case '_':
		return 0, 0, true, nil
	case '-', '!':
		return 0, 0, false, errors.New(string(line))
	}
	return 0, 0, false, errBadReply
}

// skip passes over one value of any type.
func (r *respReader) skip() error {
	t, line, err := r.header()
	if err != nil {
		return err
	}
	switch t {
	case '$', '=', '!':
		n, err := length(line)
		if err != nil {
			return err
		}
		if n >= 0 {
			if r.pos+n+2 > len(r.b) {
				return errBadReply
			}
			r.pos += n + 2
		}
	case '*', '~', '>', '%', '|':
		n, err := length(line)
		if err != nil {
			return err
		}
		if t == '%' || t == '|' {
			n *= 2
		}
		for range n {
			if err := r.skip(); err != nil {
				return err
			}
		}
		if t == '|' { // an attribute precedes the value it annotates
			return r.skip()
		}
	}
	return nil
}

// parseStreamReply reads a one-stream XREADGROUP reply — {{key, {{id,
// fields}, ...}}} in RESP2, {key: {{id, fields}, ...}} in RESP3, or a null
// when nothing was read — into messages of lane, appended to out. Messages
// deleted since they were added (null fields) are skipped. An error reply
// is returned as an error.
func parseStreamReply(raw []byte, lane int, out []message) ([]message, error) {
	r := &respReader{b: raw}
	n, err := r.aggregate()
	if err != nil || n <= 0 {
		return out, err
	}
	if n == 1 { // RESP2: {{key, messages}}
		if n, err = r.aggregate(); err != nil {
			return out, err
		}
	}
	if n != 2 {
		return out, fmt.Errorf("%w: stream reply with %d elements", errBadReply, n)
	}
	if err := r.skip(); err != nil { // the key
		return out, err
	}
	count, err := r.aggregate()
	if err != nil {
		return out, err
	}
	if cap(out)-len(out) < count {
		grown := make([]message, len(out), len(out)+count)
		copy(grown, out)
		out = grown
	}
	var spans [4][2]int // v, entry_id, entry, replayed: offsets from the message start
	for range count {
		start := r.pos
		m, err := r.aggregate()
		if err != nil {
			return out, err
		}
		if m != 2 {
			return out, fmt.Errorf("%w: stream message with %d elements", errBadReply, m)
		}
		idS, idE, _, err := r.bulk()
		if err != nil {
			return out, err
		}
		nf, err := r.aggregate()
		if err != nil {
			return out, err
		}
		if nf < 0 {
			continue // deleted since it was added
		}
		spans = [4][2]int{}
		for k := 0; k+1 < nf; k += 2 {
			ks, ke, _, err := r.bulk()
			if err != nil {
				return out, err
			}
			vs, ve, _, err := r.bulk()
			if err != nil {
				return out, err
			}
			slot := -1
			switch string(raw[ks:ke]) {
			case "v":
				slot = 0
			case "entry_id":
				slot = 1
			case "entry":
				slot = 2
			case "replayed":
				slot = 3
			}
			if slot >= 0 { // a field given twice keeps its last value
				spans[slot] = [2]int{vs - start, ve - start}
			}
		}
		if nf%2 == 1 {
			if err := r.skip(); err != nil {
				return out, err
			}
		}
		// One allocation per message: its id and the fields read, side
		// by side in one string, each a substring of it.
		idSpan := [2]int{idS - start, idE - start}
		size := idE - idS
		for _, sp := range spans {
			size += sp[1] - sp[0]
		}
		var sb strings.Builder
		sb.Grow(size)
		msgBytes := raw[start:]
		sb.Write(msgBytes[idSpan[0]:idSpan[1]])
		for _, sp := range spans {
			sb.Write(msgBytes[sp[0]:sp[1]])
		}
		all := sb.String()
		cut := func(sp [2]int) string {
			n := sp[1] - sp[0]
			v := all[:n]
			all = all[n:]
			return v
		}
		msg := message{lane: lane, id: cut(idSpan), deliveries: 1}
		msg.fields.v, msg.fields.entryID, msg.fields.entry, msg.fields.replayed = cut(spans[0]), cut(spans[1]), cut(spans[2]), cut(spans[3])
		out = append(out, msg)
	}
	return out, nil
}

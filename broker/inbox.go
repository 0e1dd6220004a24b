package broker

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/computeboard/computeboard/internal/clock"
)

// NumPriorities is the number of request priority levels (0..9, 9 most urgent).
const NumPriorities = 10

// Inbox errors (see also errors.go).
var (
	// ErrInboxFull is returned by Push when the inbox holds Capacity items.
	ErrInboxFull = errors.New("broker: inbox full")
	// ErrLeaseLost is returned by Ack, Nack and Extend when the lease expired,
	// was revoked (Requeue, Remove) or was never issued.
	ErrLeaseLost = errors.New("broker: lease lost")
)

// Item is one request waiting in the inbox. The inbox reads only the
// ordering fields; Value travels untouched from Push to Pop.
type Item struct {
	ID         string    // request entry_id; unique in the inbox
	Module     string    // source module: the unit of fairness within a priority level
	Priority   int       // 0..9, 9 first
	Deadline   time.Time // zero: none (sorts after every deadline)
	Arrived    time.Time // set by Push when zero
	Deliveries int       // times handed out so far, including before this inbox
	Value      any       // opaque payload
}

// Lease is the right to Ack or Nack one popped item. A lease that is not
// acked before Expires lapses and the item is delivered again.
type Lease struct {
	ID      string
	Token   uint64 // distinguishes this hand-out from earlier ones of the same item
	Expires time.Time
}

// CompareItems orders items of one module: higher Priority first, then
// earlier Deadline (no deadline last), then earlier Arrived, then ID. It
// returns <0 when a is handed out before b. Across modules of one priority
// level the inbox interleaves by fair share first (see Inbox).
func CompareItems(a, b Item) int {
	if c := b.Priority - a.Priority; c != 0 {
		return c
	}
	if c := compareDeadlines(a.Deadline, b.Deadline); c != 0 {
		return c
	}
	if c := a.Arrived.Compare(b.Arrived); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

func compareDeadlines(a, b time.Time) int {
	switch {
	case a.Equal(b):
		return 0
	case a.IsZero():
		return 1
	case b.IsZero():
		return -1
	}
	return a.Compare(b)
}

// InboxConfig configures an Inbox. The zero value is usable.
type InboxConfig struct {
	// Capacity bounds queued plus leased items. Default 10000.
	Capacity int
	// LeaseTimeout is how long a popped item stays leased. Default 30s.
	LeaseTimeout time.Duration
	// MaxDeliveries: an item whose lease lapses (or is nacked) after this
	// many deliveries goes to the dead list instead of the queue. 0 = no limit.
	MaxDeliveries int
	// Clock reads the time. Default clock.Real{}.
	Clock clock.Clock
}

// Inbox is a bounded in-memory priority inbox with fair sharing and leases.
//
// Order: the highest priority level with waiting items is served first.
// Within a level, modules take turns by stride scheduling (deficit
// round-robin with a cost of one per item): each module queue carries a
// pass; the queue with the lowest pass is served and its pass grows by one;
// a queue that becomes non-empty starts at the level's virtual time (the
// pass last served), so idle time earns no credit. Ties on pass go to the
// earlier deadline, then the earlier arrival. Within a module, items go by
// deadline, then arrival. Hence an item waits for at most one item of every
// other module active at its level (plus higher levels), however large
// their backlog: one module's burst cannot bury another module's request.
//
// Concurrency: one mutex guards everything; wake and room are one-slot
// channels that carry "something changed" without holding the lock.
type Inbox struct {
	cfg InboxConfig

	wake chan struct{} // capacity 1; sent (non-blocking) when an item becomes poppable
	room chan struct{} // capacity 1; sent (non-blocking) when capacity frees up

	mu      sync.Mutex
	levels  [NumPriorities]level // guarded by mu
	items   map[string]*entry    // guarded by mu; every held item, queued or leased
	leased  leaseHeap            // guarded by mu; leased entries by expiry
	modules map[string]int       // guarded by mu; held items per module
	queued  int                  // guarded by mu
	dead    []Item               // guarded by mu; drained by TakeDead
	seq     uint64               // guarded by mu; arrival counter
	token   uint64               // guarded by mu; lease counter
}

// entry is an Item plus its place in the inbox.
type entry struct {
	Item
	seq    uint64 // arrival order; kept across Nack so a nacked item keeps its place
	index  int    // position in its module heap while queued, -1 otherwise
	lease  Lease  // Token != 0 while leased
	lindex int    // position in Inbox.leased while leased
}

// level is one priority level: the module queues with items, in fair order.
type level struct {
	queues map[string]*modQueue
	active queueHeap
	vtime  uint64 // pass of the queue served last
}

type modQueue struct {
	module string
	items  entryHeap
	pass   uint64
	index  int // position in level.active
}

// NewInbox returns an empty inbox.
func NewInbox(cfg InboxConfig) *Inbox {
	if cfg.Capacity <= 0 {
		cfg.Capacity = 10000
	}
	if cfg.LeaseTimeout <= 0 {
		cfg.LeaseTimeout = 30 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	in := &Inbox{
		cfg:     cfg,
		wake:    make(chan struct{}, 1),
		room:    make(chan struct{}, 1),
		items:   make(map[string]*entry),
		modules: make(map[string]int),
	}
	for i := range in.levels {
		in.levels[i].queues = make(map[string]*modQueue)
	}
	return in
}

// Push adds an item. It fails with ErrInboxFull at capacity and with
// ErrConflict when the ID is already held (queued or leased).
func (in *Inbox) Push(it Item) error {
	if it.Priority < 0 || it.Priority >= NumPriorities {
		return fmt.Errorf("broker: push %s: priority %d out of range 0..%d", it.ID, it.Priority, NumPriorities-1)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if _, ok := in.items[it.ID]; ok {
		return fmt.Errorf("broker: push %s: %w: already held", it.ID, ErrConflict)
	}
	if len(in.items) >= in.cfg.Capacity {
		return ErrInboxFull
	}
	if it.Arrived.IsZero() {
		it.Arrived = in.cfg.Clock.Now()
	}
	in.seq++
	e := &entry{Item: it, seq: in.seq, index: -1, lindex: -1}
	in.items[it.ID] = e
	in.modules[it.Module]++
	in.enqueue(e)
	return nil
}

// Pop blocks until an item is available or ctx is done, and hands it out
// under a new lease. Lapsed leases are collected first, so their items are
// delivered again.
func (in *Inbox) Pop(ctx context.Context) (Item, Lease, error) {
	var it Item
	var l Lease
	err := in.pop(ctx, 1, func(e *entry) { it, l = e.Item, e.lease })
	return it, l, err
}

// PopBatch is Pop for up to n items: it blocks until one is available (or
// ctx is done), then takes, in the order successive Pops would, up to n−1
// more that are available at once, each under its own lease.
func (in *Inbox) PopBatch(ctx context.Context, n int) ([]Item, []Lease, error) {
	its := make([]Item, 0, min(max(n, 1), 64))
	ls := make([]Lease, 0, cap(its))
	err := in.pop(ctx, max(n, 1), func(e *entry) { its, ls = append(its, e.Item), append(ls, e.lease) })
	if err != nil {
		return nil, nil, err
	}
	return its, ls, nil
}

// pop hands out up to n items (at least one, waiting for it), calling
// take under the lock for each, leased, in hand-out order.
func (in *Inbox) pop(ctx context.Context, n int, take func(*entry)) error {
	return in.popAdmitted(ctx, n, nil, take)
}

// popAdmitted is pop over the items admit accepts (nil: all). admit runs
// under the lock, on the head of each module queue in fair order; a module
// whose head it refuses is passed over for this pop and keeps its place
// (its pass). With items waiting but none admitted it waits like an empty
// inbox, until ctx is done or something changes.
func (in *Inbox) popAdmitted(ctx context.Context, n int, admit func(Item) bool, take func(*entry)) error {
	for {
		in.mu.Lock()
		now := in.cfg.Clock.Now()
		in.expireLocked(now)
		got := 0
		for got < n {
			e := in.dequeueAdmitted(admit)
			if e == nil {
				break
			}
			in.token++
			e.Deliveries++
			e.lease = Lease{ID: e.ID, Token: in.token, Expires: now.Add(in.cfg.LeaseTimeout)}
			heap.Push(&in.leased, e)
			take(e)
			got++
		}
		if got > 0 {
			more := in.queued > 0
			in.mu.Unlock()
			if more {
				in.signal(in.wake) // pass the baton to the next waiter
			}
			return nil
		}
		var t *time.Timer
		var timer <-chan time.Time
		if len(in.leased) > 0 {
			t = time.NewTimer(in.leased[0].lease.Expires.Sub(now))
			timer = t.C
		}
		in.mu.Unlock()
		select {
		case <-ctx.Done():
			stopTimer(t)
			return ctx.Err()
		case <-in.wake:
		case <-timer:
		}
		stopTimer(t)
	}
}

// Ack ends a lease and forgets the item.
func (in *Inbox) Ack(l Lease) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	e, err := in.leasedLocked(l)
	if err != nil {
		return err
	}
	heap.Remove(&in.leased, e.lindex)
	in.forget(e)
	return nil
}

// Nack ends a lease and puts the item back in its place (it keeps its
// arrival order), or on the dead list once it reached MaxDeliveries.
func (in *Inbox) Nack(l Lease) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	e, err := in.leasedLocked(l)
	if err != nil {
		return err
	}
	heap.Remove(&in.leased, e.lindex)
	in.release(e)
	return nil
}

// Return ends a lease as if the hand-out never happened: the item goes
// back to its place and the delivery is not counted (for a hand-out that
// failed before reaching its taker).
func (in *Inbox) Return(l Lease) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	e, err := in.leasedLocked(l)
	if err != nil {
		return err
	}
	heap.Remove(&in.leased, e.lindex)
	e.lease = Lease{}
	e.Deliveries--
	in.enqueue(e)
	return nil
}

// Extend renews a lease for another LeaseTimeout from now.
func (in *Inbox) Extend(l Lease) (Lease, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	e, err := in.leasedLocked(l)
	if err != nil {
		return Lease{}, err
	}
	e.lease.Expires = in.cfg.Clock.Now().Add(in.cfg.LeaseTimeout)
	heap.Fix(&in.leased, e.lindex)
	return e.lease, nil
}

// Requeue revokes the lease of a handed-out item and queues it again (its
// holder's Ack then fails with ErrLeaseLost). It reports false if id is not
// leased.
func (in *Inbox) Requeue(id string) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	e := in.items[id]
	if e == nil || e.lease.Token == 0 {
		return false
	}
	heap.Remove(&in.leased, e.lindex)
	e.lease = Lease{}
	in.enqueue(e)
	return true
}

// Remove takes an item out whether queued or leased (a lease on it is
// revoked) and returns it.
func (in *Inbox) Remove(id string) (Item, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	e := in.items[id]
	if e == nil {
		return Item{}, false
	}
	in.unlink(e)
	in.forget(e)
	return e.Item, true
}

// RemoveFunc removes every queued item for which f returns true, and
// returns them. Handed-out (leased) items are left to their holder. f runs under the inbox lock: keep it short
// and do not call the inbox from it.
func (in *Inbox) RemoveFunc(f func(Item) bool) []Item {
	in.mu.Lock()
	defer in.mu.Unlock()
	var out []Item
	for _, e := range in.items {
		if e.lease.Token == 0 && f(e.Item) {
			in.unlink(e)
			in.forget(e)
			out = append(out, e.Item)
		}
	}
	return out
}

// ExpireLeases collects lapsed leases now (Pop also does it) and returns
// how many items went back to the queue or the dead list.
func (in *Inbox) ExpireLeases() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.expireLocked(in.cfg.Clock.Now())
}

// TakeDead returns and clears the items that exceeded MaxDeliveries.
func (in *Inbox) TakeDead() []Item {
	in.mu.Lock()
	defer in.mu.Unlock()
	d := in.dead
	in.dead = nil
	return d
}

// Len is the number of held items, queued plus leased.
func (in *Inbox) Len() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.items)
}

// Free is the room left: Capacity − Len.
func (in *Inbox) Free() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.cfg.Capacity - len(in.items)
}

// Full reports whether Push would fail with ErrInboxFull.
func (in *Inbox) Full() bool { return in.Free() <= 0 }

// Capacity is the configured bound.
func (in *Inbox) Capacity() int { return in.cfg.Capacity }

// ModuleLen is the number of held items (queued plus leased) of one module.
func (in *Inbox) ModuleLen(module string) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.modules[module]
}

// ModuleCounts returns the held items per module (a copy).
func (in *Inbox) ModuleCounts() map[string]int {
	in.mu.Lock()
	defer in.mu.Unlock()
	m := make(map[string]int, len(in.modules))
	for k, v := range in.modules {
		m[k] = v
	}
	return m
}

// Room returns a channel that receives after capacity frees up (Ack,
// Remove, dead-listing). One slot: a receive means "look again", not "one
// slot free".
func (in *Inbox) Room() <-chan struct{} { return in.room }

// HeldItem is a snapshot of one held item for inspection.
type HeldItem struct {
	Item
	Leased       bool      `json:"leased"`
	LeaseExpires time.Time `json:"lease_expires,omitzero"`
}

// Snapshot returns every held item in hand-out order for queued items
// (per CompareItems, ignoring fair-share interleaving), leased ones last.
func (in *Inbox) Snapshot() []HeldItem {
	in.mu.Lock()
	out := make([]HeldItem, 0, len(in.items))
	for _, e := range in.items {
		h := HeldItem{Item: e.Item}
		if e.lease.Token != 0 {
			h.Leased, h.LeaseExpires = true, e.lease.Expires
		}
		out = append(out, h)
	}
	in.mu.Unlock()
	sortHeld(out)
	return out
}

// Get returns a snapshot of one held item.
func (in *Inbox) Get(id string) (HeldItem, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	e := in.items[id]
	if e == nil {
		return HeldItem{}, false
	}
	h := HeldItem{Item: e.Item}
	if e.lease.Token != 0 {
		h.Leased, h.LeaseExpires = true, e.lease.Expires
	}
	return h, true
}

func sortHeld(h []HeldItem) {
	slices.SortFunc(h, func(a, b HeldItem) int {
		if a.Leased != b.Leased {
			if a.Leased {
				return 1
			}
			return -1
		}
		return CompareItems(a.Item, b.Item)
	})
}

// --- internals; every method below runs with mu held ---

func (in *Inbox) leasedLocked(l Lease) (*entry, error) {
	e := in.items[l.ID]
	if e == nil || l.Token == 0 || e.lease.Token != l.Token {
		return nil, ErrLeaseLost
	}
	return e, nil
}

// enqueue puts e in its module queue and wakes one Pop.
func (in *Inbox) enqueue(e *entry) {
	lv := &in.levels[e.Priority]
	q := lv.queues[e.Module]
	if q == nil {
		q = &modQueue{module: e.Module, pass: lv.vtime, index: -1}
		lv.queues[e.Module] = q
	}
	q.items.push(e)
	if q.index < 0 {
		q.pass = max(q.pass, lv.vtime)
		heap.Push(&lv.active, q)
	} else {
		heap.Fix(&lv.active, q.index) // the head may have changed
	}
	in.queued++
	in.signal(in.wake)
}

// dequeue takes the next item in fair order, or nil.
func (in *Inbox) dequeue() *entry {
	for p := NumPriorities - 1; p >= 0; p-- {
		lv := &in.levels[p]
		if len(lv.active) == 0 {
			continue
		}
		q := lv.active[0]
		e := q.items.pop()
		lv.vtime = q.pass
		q.pass++
		if len(q.items) == 0 {
			heap.Remove(&lv.active, q.index)
			delete(lv.queues, q.module) // a returning module restarts at vtime
		} else {
			heap.Fix(&lv.active, q.index)
		}
		in.queued--
		return e
	}
	return nil
}

// dequeueAdmitted is dequeue over the module queues whose head admit
// accepts (nil: dequeue). Refused queues are lifted off the level's heap
// while the next one is looked at, then put back with their pass intact.
func (in *Inbox) dequeueAdmitted(admit func(Item) bool) *entry {
	if admit == nil {
		return in.dequeue()
	}
	for p := NumPriorities - 1; p >= 0; p-- {
		lv := &in.levels[p]
		var refused []*modQueue
		for len(lv.active) > 0 && !admit(lv.active[0].items[0].e.Item) {
			refused = append(refused, heap.Pop(&lv.active).(*modQueue))
		}
		var e *entry
		if len(lv.active) > 0 {
			q := lv.active[0]
			e = q.items.pop()
			lv.vtime = q.pass
			q.pass++
			if len(q.items) == 0 {
				heap.Remove(&lv.active, q.index)
				delete(lv.queues, q.module)
			} else {
				heap.Fix(&lv.active, q.index)
			}
			in.queued--
		}
		for _, q := range refused {
			heap.Push(&lv.active, q)
		}
		if e != nil {
			return e
		}
	}
	return nil
}

// unlink takes a queued or leased e out of its heap (not out of items).
func (in *Inbox) unlink(e *entry) {
	if e.lease.Token != 0 {
		heap.Remove(&in.leased, e.lindex)
		e.lease = Lease{}
		return
	}
	lv := &in.levels[e.Priority]
	q := lv.queues[e.Module]
	q.items.remove(e.index)
	in.queued--
	if len(q.items) == 0 {
		heap.Remove(&lv.active, q.index)
		delete(lv.queues, q.module)
	} else {
		heap.Fix(&lv.active, q.index)
	}
}

// forget drops an unlinked e from the books and signals room.
func (in *Inbox) forget(e *entry) {
	delete(in.items, e.ID)
	if n := in.modules[e.Module] - 1; n > 0 {
		in.modules[e.Module] = n
	} else {
		delete(in.modules, e.Module)
	}
	in.signal(in.room)
}

// release returns an unlinked, formerly leased e to its queue or to dead.
func (in *Inbox) release(e *entry) {
	e.lease = Lease{}
	if in.cfg.MaxDeliveries > 0 && e.Deliveries >= in.cfg.MaxDeliveries {
		in.forget(e)
		in.dead = append(in.dead, e.Item)
		return
	}
	in.enqueue(e)
}

func (in *Inbox) expireLocked(now time.Time) int {
	n := 0
	for len(in.leased) > 0 && !in.leased[0].lease.Expires.After(now) {
		e := heap.Pop(&in.leased).(*entry)
		in.release(e)
		n++
	}
	return n
}

func stopTimer(t *time.Timer) {
	if t != nil {
		t.Stop()
	}
}

func (in *Inbox) signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// entryHeap orders one module's items: deadline, then arrival. Each slot
// carries its entry's sort key, so that sifting compares slots in the
// heap's own array instead of chasing an entry pointer per comparison (at
// thousands of held items the misses dominated the hand-out's cost). The
// order is compareEntries'; the sift is container/heap's.
type entryHeap []slot

// slot is a queued entry with its sort key (see entryKey).
type slot struct {
	mono       bool  // the deadline has a monotonic clock reading
	noDeadline bool  // sorts after every deadline
	sec        int64 // deadline, Unix seconds
	nsec       int32 // and nanoseconds
	seq        uint64
	e          *entry
}

func entryKey(e *entry) slot {
	s := slot{noDeadline: e.Deadline.IsZero(), mono: e.Deadline != e.Deadline.Round(0), seq: e.seq, e: e}
	if !s.noDeadline {
		s.sec, s.nsec = e.Deadline.Unix(), int32(e.Deadline.Nanosecond())
	}
	return s
}

// compare is compareEntries(a.e, b.e): (Unix seconds, nanoseconds) order
// instants as time.Time.Compare does, and equal instants tie as in Equal
// — unless both deadlines carry monotonic clock readings, which Compare
// and Equal then use instead.
func (a *slot) compare(b *slot) int {
	switch {
	case a.mono && b.mono:
		return compareEntries(a.e, b.e)
	case a.noDeadline != b.noDeadline:
		if a.noDeadline {
			return 1
		}
		return -1
	case a.sec != b.sec:
		return cmpInt(a.sec, b.sec)
	case a.nsec != b.nsec:
		return cmpInt(a.nsec, b.nsec)
	}
	return cmpInt(a.seq, b.seq)
}

func cmpInt[T int64 | int32 | uint64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (h entryHeap) less(i, j int) bool { return h[i].compare(&h[j]) < 0 }

func (h entryHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].e.index = i
	h[j].e.index = j
}

func (h *entryHeap) push(e *entry) {
	e.index = len(*h)
	*h = append(*h, entryKey(e))
	h.up(e.index)
}

// pop removes and returns the first entry.
func (h *entryHeap) pop() *entry {
	n := len(*h) - 1
	h.swap(0, n)
	h.down(0, n)
	return h.cut()
}

// remove removes and returns the entry at i.
func (h *entryHeap) remove(i int) *entry {
	n := len(*h) - 1
	if n != i {
		h.swap(i, n)
		if !h.down(i, n) {
			h.up(i)
		}
	}
	return h.cut()
}

// cut drops the last slot and returns its entry.
func (h *entryHeap) cut() *entry {
	old := *h
	n := len(old) - 1
	e := old[n].e
	old[n] = slot{}
	*h = old[:n]
	e.index = -1
	return e
}

func (h entryHeap) up(j int) {
	for {
		i := (j - 1) / 2 // parent
		if i == j || !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h entryHeap) down(i0, n int) bool {
	i := i0
	for {
		j1 := 2*i + 1
		if j1 >= n || j1 < 0 { // j1 < 0 after int overflow
			break
		}
		j := j1 // left child
		if j2 := j1 + 1; j2 < n && h.less(j2, j1) {
			j = j2 // = 2*i + 2  // right child
		}
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}

// compareEntries is CompareItems with the arrival counter standing in for
// Arrived (equal clock readings must not tie).
func compareEntries(a, b *entry) int {
	if c := compareDeadlines(a.Deadline, b.Deadline); c != 0 {
		return c
	}
	switch {
	case a.seq < b.seq:
		return -1
	case a.seq > b.seq:
		return 1
	}
	return 0
}

// queueHeap orders a level's non-empty module queues: lowest pass first,
// then the queue whose head comes first, then module name.
type queueHeap []*modQueue

func (h queueHeap) Len() int { return len(h) }
func (h queueHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	if a.pass != b.pass {
		return a.pass < b.pass
	}
	if c := a.items[0].compare(&b.items[0]); c != 0 {
		return c < 0
	}
	return a.module < b.module
}
func (h queueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *queueHeap) Push(x any) {
	q := x.(*modQueue)
	q.index = len(*h)
	*h = append(*h, q)
}
func (h *queueHeap) Pop() any {
	old := *h
	q := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	q.index = -1
	return q
}

// leaseHeap orders leased entries by expiry.
type leaseHeap []*entry

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].lease.Expires.Before(h[j].lease.Expires) }
func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].lindex = i
	h[j].lindex = j
}
func (h *leaseHeap) Push(x any) {
	e := x.(*entry)
	e.lindex = len(*h)
	*h = append(*h, e)
}
func (h *leaseHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.lindex = -1
	return e
}

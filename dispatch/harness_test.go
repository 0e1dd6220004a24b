package dispatch

// The scheduler's test harness: in-memory fakes for its seams (seams.go), a
// fake clock, and helpers that drive one step at a time, as Run's loop
// does, without its goroutines.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/computeboard/computeboard/broker"
	"github.com/computeboard/computeboard/internal/clock"
	"github.com/computeboard/computeboard/inventory"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/pool"
	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/wire"
)

// t0 is where every harness clock starts.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func epochOf(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// --- job store ---------------------------------------------------------------

// Who made a transition.
const (
	bySched = "scheduler" // through the JobStore seam
	byAgent = "agent"     // a test standing in for a node agent
)

// change is one transition attempted on the fake store.
type change struct {
	By       string
	Job      string
	From, To wire.JobStatus
	Code     string // the error code the update set ("" when none)
	Err      string // "" when made; else "conflict", "not_found", "fenced", "withdrawn"
}

func (c change) String() string {
	s := fmt.Sprintf("%s %s: %s→%s", c.By, c.Job, c.From, c.To)
	if c.Code != "" {
		s += " (" + c.Code + ")"
	}
	if c.Err != "" {
		s += " ERR " + c.Err
	}
	return s
}

// fakeStore holds job records and enforces what jobs.Store enforces:
// compare-and-set on the status (and Update.ExpectNode), the withdrawn
// start, and the legality of every change (wire.LegalTransition or
// wire.LegalCorrection; an illegal one fails the test).
type fakeStore struct {
	t   testing.TB
	clk clock.Clock

	mu         sync.Mutex
	recs       map[string]jobs.Job
	log        []change
	fenced     bool // the scheduler's writes fail with jobs.ErrFenced
	placements map[string]providers.Placement
	state      map[string][]byte // engine checkpoints
	saves      int               // SaveEngineState calls
	savesFence int               // SaveEngineState calls made while fenced
	listErr    error
	wholeReads int             // records asked of GetMany
	repairs    []time.Duration // RepairMirrors calls, by grace
}

func newFakeStore(t testing.TB, clk clock.Clock) *fakeStore {
	return &fakeStore{t: t, clk: clk, recs: map[string]jobs.Job{}, placements: map[string]providers.Placement{}, state: map[string][]byte{}}
}

func (s *fakeStore) put(j jobs.Job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs[j.JobID] = j
}

func (s *fakeStore) rec(id string) jobs.Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.recs[id]
	if !ok {
		s.t.Fatalf("no job record %s", id)
	}
	return j
}

func (s *fakeStore) setFenced(v bool) {
	s.mu.Lock()
	s.fenced = v
	s.mu.Unlock()
}

func (s *fakeStore) Get(_ context.Context, id string) (jobs.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, ok := s.recs[id]
	if !ok {
		return jobs.Job{}, fmt.Errorf("fake: get %s: %w", id, jobs.ErrNotFound)
	}
	return j, nil
}

func (s *fakeStore) Transition(_ context.Context, id string, from, to wire.JobStatus, u jobs.Update) (jobs.Job, error) {
	return s.transition(bySched, id, from, to, u)
}

func (s *fakeStore) transition(by, id string, from, to wire.JobStatus, u jobs.Update) (jobs.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := change{By: by, Job: id, From: from, To: to}
	if u.Error != nil {
		c.Code = u.Error.Code
	}
	fail := func(code string, err error) (jobs.Job, error) {
		c.Err = code
		s.log = append(s.log, c)
		return jobs.Job{}, fmt.Errorf("fake: transition %s %s → %s: %w", id, from, to, err)
	}
	if by == bySched && s.fenced {
		return fail("fenced", jobs.ErrFenced)
	}
	j, ok := s.recs[id]
	if !ok {
		return fail("not_found", jobs.ErrNotFound)
	}
	if j.Status != from {
		return fail("conflict", fmt.Errorf("%w: status is %s", jobs.ErrConflict, j.Status))
	}
	if u.ExpectNode != "" && j.Node != u.ExpectNode {
		return fail("conflict", fmt.Errorf("%w: node is %q", jobs.ErrConflict, j.Node))
	}
	oldCode := ""
	if j.Error != nil {
		oldCode = j.Error.Code
	}
	if !wire.LegalTransition(from, to) && !wire.LegalCorrection(from, oldCode, to) {
		s.t.Errorf("illegal transition by the %s: %s %s → %s (record error code %q)", by, id, from, to, oldCode)
	}
	now := epochOf(s.clk.Now())
	if from == wire.JobQueued && to == wire.JobRunning && j.CancelRequested {
		j.Status = wire.JobCancelled
		j.Error = &wire.JobError{Code: "cancelled", Message: "request retracted before it started"}
		j.FinishedAt = &now
		j.Version++
		s.recs[id] = j
		return fail("withdrawn", jobs.ErrWithdrawn)
	}
	if u.Node != "" {
		j.Node = u.Node
	}
	if u.Error != nil {
		e := *u.Error
		j.Error = &e
	}
	if u.ExitCode != nil {
		x := *u.ExitCode
		j.ExitCode = &x
	}
	if len(u.Explanation) > 0 {
		j.Explanation = slices.Clone(u.Explanation)
	}
	if u.Handle != "" {
		j.Handle = u.Handle
	}
	if to == wire.JobRunning && from != wire.JobRunning {
		j.Attempt++
		j.StartedAt = &now
	}
	if to.Terminal() {
		j.FinishedAt = &now
	}
	switch { // as jobs.Transition
	case u.Suspend && to == wire.JobRunning:
		j.SuspendedAt = &now
	case u.Resume || from == wire.JobRunning && to != wire.JobRunning:
		j.SuspendedAt = nil
	}
	j.Status = to
	j.UpdatedAt = now
	j.Version++
	s.recs[id] = j
	s.log = append(s.log, c)
	return j, nil
}

func (s *fakeStore) ActiveStates(context.Context) ([]jobs.State, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listErr != nil {
		return nil, s.listErr
	}
	active := s.activeLocked()
	out := make([]jobs.State, len(active))
	for i, j := range active {
		out[i] = jobs.State{JobID: j.JobID, Status: j.Status, Node: j.Node, SuspendedAt: j.SuspendedAt}
		if j.Checkpoint != nil {
			out[i].CheckpointAt = j.Checkpoint.At
		}
	}
	return out, nil
}

func (s *fakeStore) GetMany(_ context.Context, ids []string) ([]jobs.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wholeReads += len(ids)
	var out []jobs.Job
	for _, id := range ids {
		if j, ok := s.recs[id]; ok {
			out = append(out, j)
		}
	}
	return out, nil
}

// activeLocked is the records not terminal, oldest acceptance first.
func (s *fakeStore) activeLocked() []jobs.Job {
	var out []jobs.Job
	for _, j := range s.recs {
		if !j.Status.Terminal() {
			out = append(out, j)
		}
	}
	slices.SortFunc(out, func(a, b jobs.Job) int {
		return cmp.Or(cmp.Compare(a.AcceptedAt, b.AcceptedAt), cmp.Compare(a.JobID, b.JobID))
	})
	return out
}

func (s *fakeStore) SaveEngineState(_ context.Context, name string, b []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.saves++
	if s.fenced {
		s.savesFence++ // jobs.Store does not fence the checkpoint: the write lands
	}
	s.state[name] = slices.Clone(b)
	return nil
}

// RepairMirrors records the call: the fake's transitions mirror nothing,
// so there is never anything to repair (jobs.TestLostMirrorRepaired
// tests the repair itself against Redis).
func (s *fakeStore) RepairMirrors(_ context.Context, grace time.Duration) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.repairs = append(s.repairs, grace)
	return 0, nil
}

func (s *fakeStore) repairCalls() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.repairs)
}

func (s *fakeStore) LoadEngineState(_ context.Context, name string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.state[name]), nil
}

// changes returns the transitions made (not refused) by who, leaving out
// explanation refreshes (queued → queued).
func (s *fakeStore) changes(by string) []change {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []change
	for _, c := range s.log {
		if c.By == by && c.Err == "" && !(c.From == wire.JobQueued && c.To == wire.JobQueued) {
			out = append(out, c)
		}
	}
	return out
}

// attempts returns every transition the scheduler attempted (made or
// refused), explanation refreshes included.
func (s *fakeStore) attempts() []change {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []change
	for _, c := range s.log {
		if c.By == bySched {
			out = append(out, c)
		}
	}
	return out
}

// --- registry ----------------------------------------------------------------

// fakeNodes is the registry. A live node beats on every read (its LastBeat
// is the clock's now); a silenced one keeps its last beat.
type fakeNodes struct {
	clk clock.Clock

	mu     sync.Mutex
	states map[string]pool.NodeState
	live   map[string]bool
}

func newFakeNodes(clk clock.Clock) *fakeNodes {
	return &fakeNodes{clk: clk, states: map[string]pool.NodeState{}, live: map[string]bool{}}
}

func (f *fakeNodes) add(n inventory.Node) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.states[n.Name] = pool.NodeState{NodeRecord: pool.NodeRecord{Node: n, Agent: "agent-" + n.Name, Provider: "fake", Fake: true},
		LastBeat: f.clk.Now()}
	f.live[n.Name] = true
}

// setSuspend marks the node's provider as one that can suspend tasks (the
// record's Suspend, as an agent over a providers.Suspender registers it).
func (f *fakeNodes) setSuspend(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.states[name]
	st.Suspend = true
	f.states[name] = st
}

// silence stops the node's heartbeats (its LastBeat stays where it is).
func (f *fakeNodes) silence(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.live[name] = false
}

// setBeat sets a node's last heartbeat and silences it.
func (f *fakeNodes) setBeat(name string, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.states[name]
	st.LastBeat = at
	f.states[name] = st
	f.live[name] = false
}

func (f *fakeNodes) remove(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.states, name)
	delete(f.live, name)
}

func (f *fakeNodes) Nodes(context.Context) ([]pool.NodeState, time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.clk.Now()
	out := make([]pool.NodeState, 0, len(f.states))
	for _, name := range slices.Sorted(maps.Keys(f.states)) {
		st := f.states[name]
		if f.live[name] {
			st.LastBeat = now
			f.states[name] = st
		}
		st.Node = st.Node.Clone()
		out = append(out, st)
	}
	return out, now, nil
}

// --- orders ------------------------------------------------------------------

type stopOrder struct{ Node, JobID, Reason string }

// evictOrder is an eviction the scheduler ordered.
type evictOrder struct {
	Node, JobID string
	pool.Eviction
}

// fakeOrders is the assignment channel and the report stream. Assign does
// what pool's assign.lua does to the fake store's record (queued only: node
// and placement set), and records the order.
type fakeOrders struct {
	store *fakeStore

	mu        sync.Mutex
	assigns   []pool.Assignment
	stops     []stopOrder
	evicts    []evictOrder
	resumes   []stopOrder // resume orders (node, job, reason)
	resumeErr error       // what the next resume orders get
	nodeJobs  map[string]map[string]bool
	fenced    bool
	fencedTry int              // writes attempted while fenced
	assignErr map[string]error // job → the error its next assignments get
	reports   []pool.Report
	seq       int
}

func newFakeOrders(st *fakeStore) *fakeOrders {
	return &fakeOrders{store: st, nodeJobs: map[string]map[string]bool{}, assignErr: map[string]error{}}
}

func (o *fakeOrders) setFenced(v bool) {
	o.mu.Lock()
	o.fenced = v
	o.mu.Unlock()
}

func (o *fakeOrders) Assign(_ context.Context, f pool.Fence, as []pool.Assignment) []error {
	o.mu.Lock()
	defer o.mu.Unlock()
	errs := make([]error, len(as))
	for i, a := range as {
		if o.fenced {
			o.fencedTry++
			errs[i] = fmt.Errorf("fake: assign %s: %w (epoch %d)", a.JobID, pool.ErrFenced, f.Epoch)
			continue
		}
		if err := o.assignErr[a.JobID]; err != nil {
			errs[i] = err
			continue
		}
		st := o.store
		st.mu.Lock()
		j, ok := st.recs[a.JobID]
		switch {
		case !ok:
			errs[i] = fmt.Errorf("fake: assign %s: %w", a.JobID, pool.ErrNoJob)
		case j.Status != wire.JobQueued:
			errs[i] = fmt.Errorf("fake: assign %s: %w (status %s)", a.JobID, pool.ErrNotQueued, j.Status)
		default:
			j.Node = a.Placement.Node
			st.recs[a.JobID] = j
			st.placements[a.JobID] = clonePlacement(a.Placement)
		}
		st.mu.Unlock()
		if errs[i] != nil {
			continue
		}
		set := o.nodeJobs[a.Placement.Node]
		if set == nil {
			set = map[string]bool{}
			o.nodeJobs[a.Placement.Node] = set
		}
		set[a.JobID] = true
		o.assigns = append(o.assigns, pool.Assignment{JobID: a.JobID, Placement: clonePlacement(a.Placement)})
	}
	return errs
}

func clonePlacement(p providers.Placement) providers.Placement {
	p.CPUs, p.GPUs, p.MIG = slices.Clone(p.CPUs), slices.Clone(p.GPUs), slices.Clone(p.MIG)
	return p
}

func (o *fakeOrders) Stop(_ context.Context, _ pool.Fence, node, jobID, reason string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.fenced {
		o.fencedTry++
		return fmt.Errorf("fake: stop %s: %w", jobID, pool.ErrFenced)
	}
	o.stops = append(o.stops, stopOrder{node, jobID, reason})
	return nil
}

func (o *fakeOrders) Evict(_ context.Context, _ pool.Fence, node, jobID string, e pool.Eviction) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.fenced {
		o.fencedTry++
		return fmt.Errorf("fake: evict %s: %w", jobID, pool.ErrFenced)
	}
	o.evicts = append(o.evicts, evictOrder{node, jobID, e})
	return nil
}

func (o *fakeOrders) Resume(_ context.Context, _ pool.Fence, node, jobID, reason string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.fenced {
		o.fencedTry++
		return fmt.Errorf("fake: resume %s: %w", jobID, pool.ErrFenced)
	}
	if o.resumeErr != nil {
		return o.resumeErr
	}
	o.resumes = append(o.resumes, stopOrder{node, jobID, reason})
	return nil
}

func (o *fakeOrders) resumeOrders() []stopOrder {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.resumes)
}

func (o *fakeOrders) evictOrders() []evictOrder {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.evicts)
}

func (o *fakeOrders) NodeJobs(_ context.Context, node string) ([]string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Sorted(maps.Keys(o.nodeJobs[node])), nil
}

// list puts jobs in node's job set (as an earlier term's assignment did).
func (o *fakeOrders) list(node string, ids ...string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	set := o.nodeJobs[node]
	if set == nil {
		set = map[string]bool{}
		o.nodeJobs[node] = set
	}
	for _, id := range ids {
		set[id] = true
	}
}

func (o *fakeOrders) Placements(_ context.Context, ids []string) (map[string]providers.Placement, error) {
	o.store.mu.Lock()
	defer o.store.mu.Unlock()
	out := map[string]providers.Placement{}
	for _, id := range ids {
		if p, ok := o.store.placements[id]; ok {
			out[id] = clonePlacement(p)
		}
	}
	return out, nil
}

func reportSeq(id string) int {
	n, _ := strconv.Atoi(strings.TrimSuffix(id, "-0"))
	return n
}

func (o *fakeOrders) LastReport(context.Context) (string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.reports) == 0 {
		return "0-0", nil
	}
	return o.reports[len(o.reports)-1].ID, nil
}

func (o *fakeOrders) Reports(ctx context.Context, after string, count int64, block time.Duration) ([]pool.Report, error) {
	o.mu.Lock()
	var out []pool.Report
	for _, r := range o.reports {
		if reportSeq(r.ID) > reportSeq(after) && int64(len(out)) < count {
			out = append(out, r)
		}
	}
	o.mu.Unlock()
	if len(out) == 0 && block > 0 { // a blocking read with nothing to read: wait a little (real time)
		select {
		case <-ctx.Done():
		case <-time.After(min(block, 10*time.Millisecond)):
		}
	}
	return out, nil
}

// report appends an agent's report to the stream.
func (o *fakeOrders) report(r pool.Report) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seq++
	r.ID = fmt.Sprintf("%d-0", o.seq)
	o.reports = append(o.reports, r)
}

// assigned returns the assignments of job id, in order.
func (o *fakeOrders) assigned(id string) []pool.Assignment {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []pool.Assignment
	for _, a := range o.assigns {
		if a.JobID == id {
			out = append(out, a)
		}
	}
	return out
}

func (o *fakeOrders) allAssigned() []pool.Assignment {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.assigns)
}

func (o *fakeOrders) stopOrders() []stopOrder {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.stops)
}

// --- intake ------------------------------------------------------------------

// fakeIntake hands out its prepared deliveries once, then blocks until ctx
// is done; AcceptBatch returns the job record prepared for each.
type fakeIntake struct {
	store    *fakeStore // AcceptBatch creates the records there
	mu       sync.Mutex
	dels     []*broker.Delivery
	accepted map[string]jobs.Job // entry ID → its record
	admitted []string            // accounts admit() was asked about and said yes to
	refused  []string            // and no to
}

func (f *fakeIntake) NextBatchAdmitted(ctx context.Context, n int, admit func(string) bool) ([]*broker.Delivery, error) {
	f.mu.Lock()
	var out []*broker.Delivery
	var keep []*broker.Delivery
	for _, d := range f.dels {
		if len(out) < n && admit(d.Request.Account) {
			f.admitted = append(f.admitted, d.Request.Account)
			out = append(out, d)
			continue
		}
		if len(out) < n {
			f.refused = append(f.refused, d.Request.Account)
		}
		keep = append(keep, d)
	}
	f.dels = keep
	f.mu.Unlock()
	if len(out) > 0 {
		return out, nil
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

func (f *fakeIntake) AcceptBatch(_ context.Context, ds []*broker.Delivery) []broker.AcceptResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]broker.AcceptResult, len(ds))
	for i, d := range ds {
		j, ok := f.accepted[d.EntryID]
		if !ok {
			out[i].Err = errors.New("fake: no record prepared")
			continue
		}
		f.store.put(j)
		out[i] = broker.AcceptResult{Job: j, Created: true}
	}
	return out
}

// --- harness -----------------------------------------------------------------

// Templates the harness's resolver knows.
const (
	tplRequeue = "requeue" // Spec.RequeueLost
	tplGone    = "gone"    // refused by the resolver (the template was removed)
)

type harness struct {
	t      testing.TB
	ctx    context.Context
	clk    *clock.Fake
	store  *fakeStore
	nodes  *fakeNodes
	orders *fakeOrders
	in     *fakeIntake
	s      *Scheduler
	cfg    Config
}

// newHarness returns a scheduler at epoch 7 over fresh fakes. Its config
// refreshes the registry on every step (NodeRefresh 1 ns: every cycle
// advances the clock by 1 ms); tune changes the rest.
func newHarness(t testing.TB, tune func(*Config)) *harness {
	t.Helper()
	clk := clock.NewFake(t0)
	st := newFakeStore(t, clk)
	h := &harness{t: t, ctx: t.Context(), clk: clk, store: st, nodes: newFakeNodes(clk), orders: newFakeOrders(st),
		in: &fakeIntake{store: st, accepted: map[string]jobs.Job{}}}
	cfg := Config{
		Clock:         clk,
		Logger:        slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError})),
		NodeRefresh:   time.Nanosecond,
		NodeUnhealthy: 10 * time.Second,
		NodeTimeout:   time.Minute,
		AssignTimeout: 30 * time.Second,
		Resolve: func(r wire.Request) (Spec, *wire.Error) {
			switch r.Template {
			case tplGone:
				return Spec{}, &wire.Error{Code: wire.CodeUnknownTemplate, Message: "template gone"}
			case tplRequeue:
				return Spec{RequeueLost: true}, nil
			}
			return Spec{}, nil
		},
	}
	if tune != nil {
		tune(&cfg)
	}
	s, err := New(cfg, h.in, st, h.nodes, h.orders, pool.Fence{Key: "epoch", Epoch: 7})
	if err != nil {
		t.Fatal(err)
	}
	h.s, h.cfg = s, s.cfg
	return h
}

// cycle is one pass of Run's loop: read the reports after the last one
// seen, step. The clock moves 1 ms first.
func (h *harness) cycle() error {
	h.clk.Advance(time.Millisecond)
	rs, err := h.orders.Reports(h.ctx, h.s.lastReport, 4096, 0)
	if err != nil {
		return err
	}
	return h.s.step(h.ctx, rs)
}

func (h *harness) mustCycle() {
	h.t.Helper()
	if err := h.cycle(); err != nil {
		h.t.Fatalf("step: %v", err)
	}
}

// watch lets d pass a second at a time, a cycle each: the scheduler keeps
// its view of Redis (registry reads with no gap) all along.
func (h *harness) watch(d time.Duration) {
	h.t.Helper()
	for end := h.clk.Now().Add(d); h.clk.Now().Before(end); {
		h.clk.Advance(time.Second)
		h.mustCycle()
	}
}

// cycles runs n cycles.
func (h *harness) cycles(n int) {
	h.t.Helper()
	for range n {
		h.mustCycle()
	}
}

type jobOpt func(*jobs.Job)

// newJob returns a queued job record accepted now.
func (h *harness) newJob(id string, cpu, memGB float64, opts ...jobOpt) jobs.Job {
	now := epochOf(h.clk.Now())
	j := jobs.Job{
		JobData: wire.JobData{JobID: id, RequestEntryID: "req-" + id, IdempotencyKey: id, Account: "acct", Priority: 5,
			Status: wire.JobQueued, SubmittedAt: &now},
		Module: "m", AcceptedAt: now,
		Request: wire.Request{Version: 1, Command: []string{"true"}, Priority: 5, Account: "acct", IdempotencyKey: id,
			Resources: wire.Resources{CPUCores: cpu, MemoryGB: memGB}},
	}
	for _, o := range opts {
		o(&j)
	}
	return j
}

func withPriority(p int) jobOpt {
	return func(j *jobs.Job) { j.Priority, j.Request.Priority = p, p }
}

func withTemplate(tpl string) jobOpt {
	return func(j *jobs.Job) { j.Request.Command, j.Request.Template = nil, tpl }
}

func withGPUs(n int, model string) jobOpt {
	return func(j *jobs.Job) { j.Request.Resources.GPUCount, j.Request.Resources.GPUModel = n, model }
}

func withMIG(profile string) jobOpt {
	return func(j *jobs.Job) { j.Request.Resources.GPUCount, j.Request.Resources.MIGProfile = 1, profile }
}

func withNUMALocal() jobOpt { return func(j *jobs.Job) { j.Request.Resources.NUMALocal = true } }

func withDeadline(t time.Time) jobOpt {
	return func(j *jobs.Job) { j.Request.Deadline = epochOf(t) }
}

func withGang(id string, size int) jobOpt {
	return func(j *jobs.Job) { j.Request.GangID, j.Request.GangSize = id, size }
}

func withStatus(st wire.JobStatus, node string) jobOpt {
	return func(j *jobs.Job) {
		j.Status, j.Node = st, node
		if st == wire.JobRunning {
			at := j.AcceptedAt
			j.StartedAt, j.Attempt = &at, 1
		}
	}
}

// submit stores a queued record and hands it to the scheduler, as the
// intake does.
func (h *harness) submit(j jobs.Job) jobs.Job {
	h.t.Helper()
	h.store.put(j)
	h.s.addPending(h.ctx, j)
	return j
}

// agentStart does what the node's agent does with an order: the record
// queued → running on its node, then a "started" report.
func (h *harness) agentStart(id string) {
	h.t.Helper()
	node := h.store.rec(id).Node
	if _, err := h.store.transition(byAgent, id, wire.JobQueued, wire.JobRunning, jobs.Update{Node: node, ExpectNode: node}); err != nil {
		h.t.Fatalf("agent start %s: %v", id, err)
	}
	h.orders.report(pool.Report{JobID: id, Node: node, Event: pool.EventStarted, Status: string(wire.JobRunning)})
}

// agentEnd records a running job's outcome and reports it.
func (h *harness) agentEnd(id string, to wire.JobStatus) {
	h.t.Helper()
	node := h.store.rec(id).Node
	u := jobs.Update{}
	if to == wire.JobSucceeded {
		zero := 0
		u.ExitCode = &zero
	}
	if _, err := h.store.transition(byAgent, id, wire.JobRunning, to, u); err != nil {
		h.t.Fatalf("agent end %s: %v", id, err)
	}
	h.orders.report(pool.Report{JobID: id, Node: node, Event: pool.EventEnded, Status: string(to)})
}

// phase is the scheduler's phase of job id; false when it does not track it.
func (h *harness) phase(id string) (Phase, bool) {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	t, ok := h.s.jobs_[id]
	if !ok {
		return "", false
	}
	return t.phase, true
}

func (h *harness) wantPhase(id string, want Phase) {
	h.t.Helper()
	got, ok := h.phase(id)
	switch {
	case want == "" && ok:
		h.t.Errorf("job %s: phase %s, want it no longer tracked", id, got)
	case want != "" && !ok:
		h.t.Errorf("job %s: not tracked, want phase %s", id, want)
	case got != want:
		h.t.Errorf("job %s: phase %s, want %s", id, got, want)
	}
}

// wantAssigned checks the assignments of job id went to nodes, in order.
func (h *harness) wantAssigned(id string, nodes ...string) []pool.Assignment {
	h.t.Helper()
	as := h.orders.assigned(id)
	var got []string
	for _, a := range as {
		got = append(got, a.Placement.Node)
	}
	if !slices.Equal(got, nodes) {
		h.t.Errorf("job %s assigned to %v, want %v", id, got, nodes)
	}
	return as
}

// wantChanges checks the transitions made by the scheduler, in order.
func (h *harness) wantChanges(want ...string) {
	h.t.Helper()
	var got []string
	for _, c := range h.store.changes(bySched) {
		got = append(got, c.String())
	}
	if !slices.Equal(got, want) {
		h.t.Errorf("scheduler transitions:\n got %q\nwant %q", got, want)
	}
}

// held is the ledger's allocation of job id, if any.
func (h *harness) held(id string) (string, bool) {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	a, ok := h.s.ledger.Allocation(id)
	return a.Node, ok
}

// --- nodes -------------------------------------------------------------------

func cpuNode(name string, cpus float64, memMiB int64) inventory.Node {
	return inventory.Node{Name: name, CPUs: cpus, MemoryMiB: memMiB}
}

// gpuNode has n whole GPUs of model, GPU-<name>-<i>.
func gpuNode(name, model string, n int) inventory.Node {
	nd := cpuNode(name, 8, 32768)
	for i := range n {
		nd.GPUs = append(nd.GPUs, inventory.GPU{UUID: fmt.Sprintf("GPU-%s-%d", name, i), Model: model, MemoryMiB: 81920, Source: inventory.FromConfig})
	}
	return nd
}

// migNode has one A100 in MIG mode: MIG-<name>-0 (1g.10gb) and
// MIG-<name>-1 (3g.40gb).
func migNode(name string) inventory.Node {
	nd := cpuNode(name, 8, 32768)
	nd.GPUs = []inventory.GPU{{UUID: "GPU-" + name + "-0", Model: "A100", MemoryMiB: 81920, MIGMode: true, Source: inventory.FromConfig,
		MIG: []inventory.MIGInstance{{UUID: "MIG-" + name + "-0", Profile: "1g.10gb"}, {UUID: "MIG-" + name + "-1", Profile: "3g.40gb"}}}}
	return nd
}

// numaNode has 4 CPUs in two NUMA domains: 0 (CPUs 0, 1) and 1 (CPUs 2, 3),
// 4 GiB each.
func numaNode(name string) inventory.Node {
	nd := cpuNode(name, 4, 8192)
	nd.NUMA = []inventory.NUMADomain{{ID: 0, CPUs: []int{0, 1}, MemoryMiB: 4096}, {ID: 1, CPUs: []int{2, 3}, MemoryMiB: 4096}}
	return nd
}

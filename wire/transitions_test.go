package wire

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The transitions the code makes today, by call site (jobs.Store.Transition,
// formerly broker.Broker.Transition, and its Lua script), each covered by the
// table (or, the last group, by LegalCorrection):
//
//	queued → queued     internal/adapter/dispatch.go PublishExplanations; dispatch/explain.go (explanation refresh)
//	queued → running    internal/adapter/dispatch.go start; agent/agent.go start (compare-and-set, ExpectNode)
//	queued → cancelled  transition.lua, a start that finds the request withdrawn (broker/lua → jobs/lua);
//	                    broker/jobs.go consumeAccepted → jobs/entry.go; internal/adapter/dispatch.go
//	                    Recover, applyCancels (twice); dispatch/recover.go; dispatch/scheduler.go (twice);
//	                    broker/feed.go retireRecord (cancel)
//	queued → failed     internal/adapter/dispatch.go addPending (gang_incomplete, config changed), rejectFinal;
//	                    dispatch/scheduler.go (twice: gang timeout, rejectFinal);
//	                    broker/deadletter.go → feed.go retireRecord (dead-lettered after acceptance)
//	queued → expired    internal/adapter/dispatch.go rejectFinal (deadline-infeasible);
//	                    dispatch/scheduler.go rejectFinal; broker/feed.go expireJob → retireRecord
//	queued → rejected   no Transition call: a refused request's record is created rejected
//	                    (accept.lua); kept legal for a refusal after acceptance
//	running → running   agent/agent.go (the task handle); dispatch/preempt.go (an eviction on the victim's explanation)
//	running → succeeded, failed, cancelled
//	                    internal/adapter/dispatch.go finish (exit, killed, timeout, lost), start
//	                    (start_failed), endLost, reattach (lost); agent/agent.go end (and an
//	                    eviction in mode cancel: cancelled, error.code preempted);
//	                    dispatch/nodes.go (node silent: failed, lost)
//	running → queued    internal/adapter/dispatch.go requeueUnstarted, finish (retry);
//	                    agent/agent.go (retry, requeue, eviction in mode requeue or checkpoint);
//	                    dispatch/nodes.go (RequeueLost)
//	failed → succeeded, failed, cancelled
//	                    agent/agent.go end, when the scheduler had ended the job lost (LegalCorrection)
type madeTransition struct {
	from, to JobStatus
	code     string // error.code of from, for corrections
}

var madeByCode = []madeTransition{
	{JobQueued, JobQueued, ""}, {JobQueued, JobRunning, ""}, {JobQueued, JobCancelled, ""},
	{JobQueued, JobFailed, ""}, {JobQueued, JobExpired, ""}, {JobQueued, JobRejected, ""},
	{JobRunning, JobRunning, ""}, {JobRunning, JobSucceeded, ""}, {JobRunning, JobFailed, ""},
	{JobRunning, JobCancelled, ""}, {JobRunning, JobQueued, ""},
	{JobFailed, JobSucceeded, JobErrorLost}, {JobFailed, JobFailed, JobErrorLost}, {JobFailed, JobCancelled, JobErrorLost},
}

func TestTransitionsCoverTheCode(t *testing.T) {
	for _, m := range madeByCode {
		if !LegalTransition(m.from, m.to) && !LegalCorrection(m.from, m.code, m.to) {
			t.Errorf("%s → %s (code %q) is made by the code but not legal", m.from, m.to, m.code)
		}
	}
}

// TestLegalTransitionTable checks every pair of statuses.
func TestLegalTransitionTable(t *testing.T) {
	legal := map[[2]JobStatus]bool{
		{JobQueued, JobQueued}: true, {JobQueued, JobRunning}: true, {JobQueued, JobCancelled}: true,
		{JobQueued, JobFailed}: true, {JobQueued, JobExpired}: true, {JobQueued, JobRejected}: true,
		{JobRunning, JobRunning}: true, {JobRunning, JobSucceeded}: true, {JobRunning, JobFailed}: true,
		{JobRunning, JobCancelled}: true, {JobRunning, JobQueued}: true,
	}
	all := append(JobStatuses(), "", "bogus")
	for _, from := range all {
		for _, to := range all {
			if got, want := LegalTransition(from, to), legal[[2]JobStatus{from, to}]; got != want {
				t.Errorf("LegalTransition(%q, %q) = %v, want %v", from, to, got, want)
			}
		}
	}
	// Every legal change is made by the code today.
	for pair := range legal {
		if !slices.Contains(madeByCode, madeTransition{pair[0], pair[1], ""}) {
			t.Errorf("%s → %s is legal but not listed as made by the code", pair[0], pair[1])
		}
	}
}

// TestTerminalStatusesStay: terminal statuses have no outgoing transition;
// the one exception is the correction of a job ended failed/lost.
func TestTerminalStatusesStay(t *testing.T) {
	codes := []string{"", JobErrorLost, "exit_status", "timeout", "killed", "cancelled", "start_failed", "LOST", "lost "}
	for _, from := range JobStatuses() {
		if !from.Terminal() {
			continue
		}
		if len(Transitions()[from]) != 0 {
			t.Errorf("terminal %s has transitions %v", from, Transitions()[from])
		}
		for _, to := range append(JobStatuses(), "") {
			if LegalTransition(from, to) {
				t.Errorf("terminal %s → %s is legal", from, to)
			}
			for _, code := range codes {
				want := from == JobFailed && code == JobErrorLost && (to == JobSucceeded || to == JobFailed || to == JobCancelled)
				if got := LegalCorrection(from, code, to); got != want {
					t.Errorf("LegalCorrection(%s, %q, %s) = %v, want %v", from, code, to, got, want)
				}
			}
		}
	}
	// Non-terminal statuses are never "corrected".
	for _, from := range JobStatuses() {
		for _, to := range JobStatuses() {
			if !from.Terminal() && LegalCorrection(from, JobErrorLost, to) {
				t.Errorf("LegalCorrection(%s, lost, %s)", from, to)
			}
		}
	}
}

func TestTransitionsCopy(t *testing.T) {
	tr := Transitions()
	order := JobStatuses()
	for from, tos := range tr {
		if !from.Valid() || from.Terminal() || len(tos) == 0 {
			t.Errorf("row %s: %v", from, tos)
		}
		for i, to := range tos {
			if !LegalTransition(from, to) || !to.Valid() {
				t.Errorf("%s → %s listed but not legal", from, to)
			}
			if i > 0 && slices.Index(order, tos[i-1]) >= slices.Index(order, to) {
				t.Errorf("row %s not in lifecycle order: %v", from, tos)
			}
		}
	}
	tr[JobQueued][0] = JobSucceeded
	tr[JobSucceeded] = []JobStatus{JobQueued}
	c := Corrections()
	c[0] = JobQueued
	if LegalTransition(JobSucceeded, JobQueued) || Transitions()[JobQueued][0] != JobQueued || Corrections()[0] != JobSucceeded {
		t.Error("Transitions or Corrections returned the table itself")
	}
}

// transitionsDoc renders the table as docs/wire-format.md lists it.
func transitionsDoc() string {
	list := func(ss []JobStatus) string {
		q := make([]string, len(ss))
		for i, s := range ss {
			q[i] = "`" + string(s) + "`"
		}
		return strings.Join(q, ", ")
	}
	var b strings.Builder
	tr := Transitions()
	for _, from := range JobStatuses() {
		if tos := tr[from]; len(tos) > 0 {
			fmt.Fprintf(&b, "- `%s` → %s\n", from, list(tos))
		}
	}
	fmt.Fprintf(&b, "- `%s` with `error.code` `%s` → %s (correction)\n", JobFailed, JobErrorLost, list(Corrections()))
	return b.String()
}

// TestTransitionsDoc: the public doc lists exactly the table's pairs.
func TestTransitionsDoc(t *testing.T) {
	doc, err := os.ReadFile("../docs/wire-format.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)<!-- transitions:[^\n]*-->\n(.*?)<!-- /transitions -->`).FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/wire-format.md has no <!-- transitions --> block")
	}
	if got, want := string(m[1]), transitionsDoc(); got != want {
		t.Errorf("docs/wire-format.md's transitions differ from wire.Transitions; want:\n%s\ngot:\n%s", want, got)
	}
}

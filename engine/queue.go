package engine

import (
	"cmp"
	"math"
	"strings"
	"time"
)

// This file is step 1 of the cycle: each pending job's priority and the
// order of jobs within an account.
//
// The priority formula (in priority levels, like Slurm's multifactor sum):
//
//	P = W_level·level + W_age·hours_waited + W_fs·F_fs + W_dl·urgency
//
// (the age term capped at MaxAge only when MaxAge > 0, an explicit choice
// that gives up the starvation bound below)
//	urgency = 0 without a deadline; 1 if slack ≤ 0; else H/(H+slack)
//	slack = deadline − now − estimated duration, H = Policy.DeadlineHorizon
//
// Jobs are then compared (lower runs first) by:
//
//  1. band = ⌊P / Policy.Band⌋, higher first ("comparable priority");
//  2. within a band, jobs with a deadline before jobs without, by
//     Policy.DeadlineOrder: least slack first (default; overdue jobs by how
//     late they would finish, the latest first), or earliest deadline first
//     (the deadline alone, whatever the work left);
//  3. P, higher first; 4. Submitted, earlier first; 5. ID.

// Starvation bound. Without a cap the age term keeps growing, so a job J
// outranks any job K submitted X = (9·W_level + W_fs + W_dl + Band)/W_age
// hours or more after it: P_J ≥ W_age·a_J and P_K ≤ 9·W_level + W_age·a_K +
// W_fs + W_dl, so P_J − P_K ≥ Band and J is in a higher band (bands come
// first in the order, and the selection algorithms only choose among the
// accounts whose head is in the top band). Under the default weights X is
// 26 h. Only entries within their account's guaranteed minimum go ahead of
// a higher band. With a cap C = MaxAge > 0, a fully aged level-0 job only
// outranks level-9 jobs that have waited less than
// (C − 9·W_level − W_fs − W_dl − Band)/W_age hours (none if C ≤ 13 under the
// default weights): a level-9 backlog that waits longer starves it.

// StarvationBound returns X above: under policy p no job ever ranks behind
// a job submitted X or more after it, whatever the levels, fair shares and
// deadlines. It is 0 when p has no such bound: ageing off (NoAging or a
// zero age weight) or capped (MaxAge > 0), the explicit configurations that
// allow starvation.
func StarvationBound(p Policy) time.Duration {
	p = p.withDefaults()
	w := p.Weights
	if p.NoAging || w.Age <= 0 || p.MaxAge > 0 {
		return 0
	}
	levels := 9*max(w.Level, 0) + max(w.FairShare, 0) + max(w.Deadline, 0) + p.Band
	return time.Duration(levels / w.Age * float64(time.Hour))
}

// Priority returns the priority formula's value for j and its factors, under
// policy p (zero fields take their defaults). fs is the fair-share factor of
// j's account (Share.Factor from FairShares).
func Priority(j Job, now time.Time, p Policy, fs float64) (float64, Factors) {
	p = p.withDefaults()
	return priority(&j, now, &p, fs)
}

func priority(j *Job, now time.Time, p *Policy, fs float64) (float64, Factors) {
	f := Factors{Level: j.Priority, FairShare: fs}
	if w := now.Sub(j.Submitted); w > 0 && !j.Submitted.IsZero() && !p.NoAging {
		f.AgeHours = w.Hours()
		f.Age = p.Weights.Age * f.AgeHours
		if p.MaxAge > 0 {
			f.Age = min(f.Age, p.MaxAge)
		}
	}
	if !j.Deadline.IsZero() {
		f.HasDeadline = true
		f.Slack = j.Deadline.Sub(now) - j.EstDuration
		f.DeadlineMiss = f.Slack < 0
		if f.Slack <= 0 {
			f.Urgency = 1
		} else {
			h := float64(p.DeadlineHorizon)
			f.Urgency = h / (h + float64(f.Slack))
		}
	}
	prio := p.Weights.Level*float64(j.Priority) + f.Age + p.Weights.FairShare*fs + p.Weights.Deadline*f.Urgency
	return prio, f
}

// entry is one unit of the order: a single job, or every pending member of
// a gang (placed all together or not at all).
type entry struct {
	jobs []int // indices into Snapshot.Pending; a gang's members in ID order
	acct int   // index into the cycle's account table
	prio float64
	band float64
	// guaranteed: the account's guarantee puts it ahead (set as it comes
	// to its account's head, fairshare.go); hasDeadline: its best member
	// has a deadline.
	guaranteed, hasDeadline bool
	submitted               time.Time
	id                      string  // first member's ID
	dkey                    int64   // deadline order key, lower first: slack (LeastSlackFirst) or deadline (EarliestDeadlineFirst), ns
	cost                    float64 // billing-seconds if run for its planning duration (all members)
	// use is what it allocates: a single job's request, shared with the
	// cycle's request of its shape (never changed through use); a gang's
	// own sum.
	use *Resources
}

// compareEntries orders entries within one account and for SelectPriority
// across accounts. Lower runs first.
func compareEntries(a, b *entry) int {
	return cmp.Or(
		-cmp.Compare(a.band, b.band),
		compareDeadline(a, b),
		-cmp.Compare(a.prio, b.prio),
		a.submitted.Compare(b.submitted),
		strings.Compare(a.id, b.id),
	)
}

func compareDeadline(a, b *entry) int {
	switch {
	case a.hasDeadline && b.hasDeadline:
		return cmp.Compare(a.dkey, b.dkey)
	case a.hasDeadline:
		return -1
	case b.hasDeadline:
		return 1
	}
	return 0
}

func bandOf(prio, width float64) float64 {
	return math.Floor(prio / width)
}

// Ranker tells the order of jobs within one account's queue as Schedule
// sorts it at one instant, without running a cycle: by the priority
// formula, then submission, then ID. It ranks single jobs without a
// deadline only (a deadline or a gang changes the sort keys); their
// account's fair-share term, common to every job of the account, is left
// out, and the band, a floor of the priority, never reorders them. The
// dispatcher uses it to tell that the jobs it plans in a partial plan are
// the head of each account's queue (dispatch/partial.go).
type Ranker struct {
	p   Policy
	now time.Time
}

// NewRanker returns a Ranker for p at now.
func NewRanker(p Policy, now time.Time) *Ranker {
	return &Ranker{p: p.withDefaults(), now: now}
}

// Rank is a job's place in its account's queue: see Ranker.
type Rank struct {
	prio      float64
	submitted time.Time
	id        string
}

// Rank returns j's rank.
func (r *Ranker) Rank(j *Job) Rank {
	prio, _ := priority(j, r.now, &r.p, 0)
	return Rank{prio: prio, submitted: j.Submitted, id: j.ID}
}

// Before reports whether the job ranked a goes before the job ranked b in
// their account's queue.
func (a Rank) Before(b Rank) bool {
	return cmp.Or(-cmp.Compare(a.prio, b.prio), a.submitted.Compare(b.submitted), strings.Compare(a.id, b.id)) < 0
}

package engine

import (
	"fmt"
	"strings"
)

// Code is a typed reason why a job was not placed. "Can't place" is a
// reason, not an error: codes flow into the Plan, blackboard entries and
// golden tests.
type Code string

// Reason codes. The comment says whether the job may run later (transient)
// or never can as asked (final).
const (
	ReasonNoFit              Code = "no-fit"              // transient: no node has room now; NoFit says which dimension on how many nodes
	ReasonQuota              Code = "quota"               // transient (final if the request alone exceeds the quota): the account's quota is used up
	ReasonOverShare          Code = "over-share"          // transient: the account is above Policy.ShareCap × its share
	ReasonGangIncomplete     Code = "gang-incomplete"     // transient: fewer than GangSize members are pending
	ReasonGangNoFit          Code = "gang-no-fit"         // transient: the members do not all fit at once
	ReasonDeadlineInfeasible Code = "deadline-infeasible" // the deadline can no longer be met: final under DeadlineReject; else transient (the job waits, and the message says on what) or, on a placed job, a flag in its explanation
	ReasonBackfillBlocked    Code = "backfill-blocked"    // transient: it would fit, but would delay the reserved job
	ReasonReserved           Code = "reserved"            // transient: the first blocked job; it holds the reservation
	ReasonBlocked            Code = "blocked"             // transient: a higher job is blocked and backfill is off
	ReasonNoSuchGPU          Code = "no-such-gpu"         // final: no node has enough GPUs of that model (and memory)
	ReasonNoSuchMIG          Code = "no-such-mig"         // final: no node has enough instances of that MIG profile
	ReasonNoSuchTier         Code = "no-such-tier"        // final: no node has that storage tier with enough capacity
	ReasonNoSuchNode         Code = "no-such-node"        // final: no node matches the NodeSelector
	ReasonImpossible         Code = "impossible"          // final: no node could ever fit the request, even empty
	ReasonInvalid            Code = "invalid"             // final: malformed request (priority out of range, negative amount, bad gang)
)

// NoFit counts, over the nodes considered, why each node was turned down.
// A node is counted once, under the first check it failed, in the order:
// unhealthy, selector, GPU model, MIG profile, NUMA, then the first short
// resource dimension.
type NoFit struct {
	Nodes     int       // nodes considered
	Unhealthy int       `json:",omitempty"`
	Selector  int       `json:",omitempty"` // NodeSelector mismatch
	GPUModel  int       `json:",omitempty"` // too few free GPUs of the model (or with enough memory)
	MIG       int       `json:",omitempty"` // too few free instances of the profile
	NUMA      int       `json:",omitempty"` // no NUMA domain with the CPU and memory
	Reserved  int       `json:",omitempty"` // would delay the reservation
	Short     Resources // per dimension: nodes whose free amount is too small
}

// String is the stable one-line form used in messages and golden files:
// "0/12 nodes: 8 cpu, 3 gpu, 1 selector".
func (n *NoFit) String() string {
	if n == nil {
		return ""
	}
	var parts []string
	add := func(c int, what string) {
		if c > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c, what))
		}
	}
	add(n.Unhealthy, "unhealthy")
	add(n.Selector, "selector")
	add(n.GPUModel, "gpu-model")
	add(n.MIG, "mig")
	add(n.NUMA, "numa")
	add(n.Reserved, "reserved")
	for d, c := range n.Short {
		add(int(c), Dim(d).String())
	}
	s := fmt.Sprintf("0/%d nodes", n.Nodes)
	if len(parts) > 0 {
		s += ": " + strings.Join(parts, ", ")
	}
	return s
}

func reject(id string, c Code, final bool, format string, args ...any) Rejection {
	return Rejection{JobID: id, Reason: c, Final: final, Message: fmt.Sprintf(format, args...)}
}

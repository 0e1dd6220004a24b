package engine

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"
)

// StateVersion is the current State format. Bump it, and add a golden file
// under testdata, when the JSON form changes incompatibly. (drr_credited was
// added within version 1: older checkpoints read as false, and older
// engines ignore it.)
const StateVersion = 1

// State is what the engine carries from one cycle to the next. It is plain
// data: the adapter stores it as JSON (a checkpoint) and passes it back. The
// zero State is a valid start.
type State struct {
	Version  int                     `json:"version"`
	LastNow  time.Time               `json:"last_now"`           // Snapshot.Now of the cycle that produced it
	Accounts map[string]AccountState `json:"accounts,omitempty"` // by account name
	// VirtualTime is the WFQ system virtual time V, in billing-seconds per
	// share. It only moves forward and never follows a clock.
	VirtualTime float64 `json:"virtual_time,omitempty"`
	// DRRNext is the account at the DRR round-robin pointer: the next cycle
	// starts its round there.
	DRRNext string `json:"drr_next,omitempty"`
	// DRRCredited says DRRNext has already received its quantum for the
	// current visit: it keeps the turn while its deficit covers its head
	// and gets no second quantum (false in checkpoints written before the
	// field existed, which only costs that account one extra quantum).
	DRRCredited bool `json:"drr_credited,omitempty"`
	// Preemptions are the evictions of the last hour (or of the last
	// PreemptionConfig.Cooldown, if longer), oldest first: the budgets and
	// the ping-pong rules read them (preempt.go). Added within version 1:
	// older checkpoints read as none.
	Preemptions []PreemptionRecord `json:"preemptions,omitempty"`
}

// PreemptionRecord is one eviction planned by an earlier cycle (or this one).
type PreemptionRecord struct {
	At      time.Time `json:"at"`
	Job     string    `json:"job"`               // the victim
	By      string    `json:"by"`                // the preemptor
	Account string    `json:"account,omitempty"` // the victim's account
	Pool    string    `json:"pool,omitempty"`    // the victim's node's pool (Policy.PoolLabel)
}

// AccountState is one account's scheduling memory.
type AccountState struct {
	// Usage is the decayed usage in billing-seconds as of UsageAt. Decaying it
	// to t is Usage·2^(−(t−UsageAt)/HalfLife): O(1), no history list.
	Usage   float64   `json:"usage,omitempty"`
	UsageAt time.Time `json:"usage_at"`
	// Finish is the WFQ finish tag of the account's last dispatched job.
	Finish float64 `json:"finish,omitempty"`
	// Deficit is the DRR deficit counter, in billing-seconds.
	Deficit float64 `json:"deficit,omitempty"`
	// Compensation multiplies the account's lottery tickets until its next
	// win (1/f after using fraction f of a quantum); 0 means 1.
	Compensation float64 `json:"compensation,omitempty"`
}

// Clone returns a deep copy.
func (s State) Clone() State {
	s.Accounts = maps.Clone(s.Accounts)
	s.Preemptions = slices.Clone(s.Preemptions)
	return s
}

// MarshalState encodes s as indented JSON, the checkpoint format.
func MarshalState(s State) ([]byte, error) {
	if s.Version == 0 {
		s.Version = StateVersion
	}
	return json.MarshalIndent(s, "", "  ")
}

// UnmarshalState decodes a checkpoint. A version newer than StateVersion is
// an error; version 0 (an empty document) is accepted as a fresh State.
func UnmarshalState(data []byte) (State, error) {
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return State{}, fmt.Errorf("engine: state: %w", err)
	}
	if s.Version > StateVersion {
		return State{}, fmt.Errorf("engine: state: version %d is newer than %d", s.Version, StateVersion)
	}
	s.Version = StateVersion
	return s, nil
}

// UsageAt returns each account's decayed usage brought to now with
// half-life h (zero: the default): where a cycle at now starts from, before
// it charges the jobs that ran since LastNow. For views (the fair-share
// tree of the API); FairShares turns it into standings.
func (st State) UsageAt(now time.Time, h time.Duration) map[string]float64 {
	if h <= 0 {
		h = DefaultHalfLife
	}
	out := make(map[string]float64, len(st.Accounts))
	for n, a := range st.Accounts {
		out[n] = decay(a.Usage, now.Sub(a.UsageAt), h)
	}
	return out
}

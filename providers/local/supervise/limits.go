package supervise

import "fmt"

// Rlimit is one resource limit (setrlimit(2)) to set on a task: soft and
// hard both become Value, never above the setting process's own hard
// limit.
type Rlimit struct {
	Resource int    `json:"resource"`
	Value    uint64 `json:"value"`
}

// ApplyOwnLimits sets limits on the calling process, so that the children
// it starts from now on inherit them: the supervisor calls it right before
// it starts the task.
func ApplyOwnLimits(limits []Rlimit) error {
	for _, l := range limits {
		if err := setLimit(0, l); err != nil {
			return fmt.Errorf("set resource limit %d to %d: %w", l.Resource, l.Value, err)
		}
	}
	return nil
}

// applyChildLimits sets limits on a started process (prlimit(2)): Start
// calls it right after it starts a task watched in-process, which leaves
// the task a moment to run under the provider's own limits.
func applyChildLimits(pid int, limits []Rlimit) error {
	for _, l := range limits {
		if err := setLimit(pid, l); err != nil {
			return fmt.Errorf("set resource limit %d of pid %d to %d: %w", l.Resource, pid, l.Value, err)
		}
	}
	return nil
}

//go:build !linux

package supervise

// Resource limits are applied on Linux only; elsewhere tasks run under the
// provider's own limits.
const (
	RlimitNOFILE = 7
	RlimitNPROC  = 6
	RlimitCORE   = 4
)

func setLimit(int, Rlimit) error { return nil }

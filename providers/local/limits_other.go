//go:build !linux

package local

// Resource limits are applied on Linux only; elsewhere tasks run under the
// provider's own limits.
const (
	rlimitNOFILE = 7
	rlimitNPROC  = 6
	rlimitCORE   = 4
)

func setLimit(int, rlimit) error { return nil }

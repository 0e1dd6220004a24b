//go:build linux && (mips || mipsle || mips64 || mips64le)

package local

const rlimitNPROC = 0x8

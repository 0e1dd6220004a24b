//go:build linux && (mips || mipsle || mips64 || mips64le)

package supervise

const RlimitNPROC = 0x8

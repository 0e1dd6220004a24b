//go:build !linux

package local

import (
	"errors"
	"syscall"
)

var errNoProc = errors.New("process identity needs Linux /proc")

// Without /proc a process's identity cannot be checked, so a restarted
// adapter reports every unfinished task it did not start as lost.
func procStat(int) (byte, int, uint64, error) { return 0, 0, 0, errNoProc }
func bootID() (string, error)                 { return "", errNoProc }
func dead(byte) bool                          { return true }

func groupAlive(pgid int) bool { return syscall.Kill(-pgid, 0) == nil }

package local

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// openPidfd opens a non-blocking pidfd on pid, as a File the runtime's
// poller watches: it turns readable when the process exits (any process,
// not only a child).
func openPidfd(pid int) (*os.File, error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.ESRCH) {
		return nil, errProcessGone
	}
	if err != nil {
		return nil, fmt.Errorf("pidfd_open: %w", err)
	}
	return os.NewFile(uintptr(fd), "pidfd"), nil
}

// waitExit waits until the pidfd f turns readable (its process exited),
// without a thread: the runtime's poller wakes it. It returns an error
// when f is closed meanwhile, or cannot be polled.
func waitExit(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	// Readiness is checked, not assumed: the poller forgets an edge that
	// came before the wait began (its exit, already), and may wake early.
	var perr error
	err = rc.Read(func(fd uintptr) bool {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		if err != nil && !errors.Is(err, unix.EINTR) {
			perr = err
			return true
		}
		return n > 0 && fds[0].Revents != 0
	})
	if err == nil {
		err = perr
	}
	return err
}

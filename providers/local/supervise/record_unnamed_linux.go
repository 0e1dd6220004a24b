//go:build linux && (amd64 || arm64)

package supervise

import (
	"errors"
	"os"
	"strconv"
	"syscall"
	"unsafe"
)

// oTmpfile is open(2)'s O_TMPFILE on these architectures (__O_TMPFILE |
// O_DIRECTORY; the syscall package does not name it).
const oTmpfile = 0o20000000 | syscall.O_DIRECTORY

// publishUnnamed writes b to an unnamed file in dir (O_TMPFILE), syncs it
// if sync, and links it in at final, which must not exist: linkat(2)
// fails then, so the first complete record wins and a reader sees the
// whole record or none, as with a temp file, but without the temp name to
// unlink afterwards (see syncRecordFrom for why unlinks cost). done is
// false when this way is not open here (no O_TMPFILE on the filesystem or
// kernel, no /proc to link from): nothing was published, and the caller
// goes the temp file's way.
func publishUnnamed(dir, final string, b []byte, sync bool) (done bool, err error) {
	f, err := os.OpenFile(dir, oTmpfile|os.O_WRONLY, 0o600)
	if err != nil {
		return false, nil
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		return true, err
	}
	if sync {
		if err := f.Sync(); err != nil {
			return true, err
		}
	}
	switch err := linkat("/proc/self/fd/"+strconv.Itoa(int(f.Fd())), final); {
	case err == nil:
		return true, nil
	case errors.Is(err, syscall.EEXIST):
		return true, ErrRecordExists
	default:
		return false, nil // the unnamed file goes with its descriptor
	}
}

// linkat links the file at from to to, following from if it is a
// symbolic link (as /proc/self/fd/N is), with AT_FDCWD for both.
func linkat(from, to string) error {
	const atFDCWD, atSymlinkFollow = -100, 0x400
	f, err := syscall.BytePtrFromString(from)
	if err != nil {
		return err
	}
	t, err := syscall.BytePtrFromString(to)
	if err != nil {
		return err
	}
	fd := atFDCWD
	_, _, e := syscall.Syscall6(syscall.SYS_LINKAT, uintptr(fd), uintptr(unsafe.Pointer(f)), uintptr(fd), uintptr(unsafe.Pointer(t)), atSymlinkFollow, 0)
	if e != 0 {
		return e
	}
	return nil
}

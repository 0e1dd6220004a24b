//go:build !linux

package local

import (
	"errors"
	"os"
)

// Without pidfds an adopted task's end is seen by polls only.
func openPidfd(int) (*os.File, error) { return nil, errors.ErrUnsupported }
func waitExit(*os.File) error         { return errors.ErrUnsupported }

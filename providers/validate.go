package providers

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// ValidTaskID matches the task IDs every provider accepts: safe as a
// single path element (a task directory) and as a batch job's name.
var ValidTaskID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// Validate checks what every provider requires of a task: an ID matching
// ValidTaskID, an argv whose first word is an absolute path and with no
// NUL, an absolute working directory if any, a timeout not negative, and a
// note of JSON within MaxNoteBytes. Errors wrap ErrInvalidTask. Providers
// add their own checks after it.
func (t Task) Validate() error {
	switch {
	case !ValidTaskID.MatchString(t.ID):
		return fmt.Errorf("%w: ID must match %s", ErrInvalidTask, ValidTaskID)
	case len(t.Argv) == 0:
		return fmt.Errorf("%w: empty argv", ErrInvalidTask)
	case !filepath.IsAbs(t.Argv[0]):
		return fmt.Errorf("%w: argv[0] %q is not an absolute path", ErrInvalidTask, t.Argv[0])
	case slices.ContainsFunc(t.Argv, func(s string) bool { return strings.IndexByte(s, 0) >= 0 }):
		return fmt.Errorf("%w: NUL in argv", ErrInvalidTask)
	case t.Dir != "" && !filepath.IsAbs(t.Dir):
		return fmt.Errorf("%w: dir %q is not an absolute path", ErrInvalidTask, t.Dir)
	case t.Timeout < 0:
		return fmt.Errorf("%w: negative timeout %v", ErrInvalidTask, t.Timeout)
	case len(t.Note) > MaxNoteBytes:
		return fmt.Errorf("%w: note is %d bytes; the limit is %d", ErrInvalidTask, len(t.Note), MaxNoteBytes)
	case len(t.Note) > 0 && !json.Valid(t.Note):
		return fmt.Errorf("%w: note is not JSON", ErrInvalidTask)
	}
	return nil
}

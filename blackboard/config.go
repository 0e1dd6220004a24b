package blackboard

import (
	"log/slog"
	"time"

	"github.com/computeboard/computeboard/internal/clock"
)

// Config configures a Store. The zero value is usable; each field's comment
// gives its default. New fills the defaults and validates once.
type Config struct {
	// Namespace is the board name in asi:bb:{<board>}. Default "default".
	// It must not contain '{' or '}'.
	Namespace string
	// Clock supplies every timestamp. Default clock.Real{}.
	Clock clock.Clock
	// Logger receives warnings (capacity held by CRITICAL entries, sweep
	// errors in Run). Default: discard.
	Logger *slog.Logger
	// MaxEntries caps the number of stored entries. Default 10000 (0 keeps
	// the default); -1 means unlimited.
	MaxEntries int
	// EventsMaxLen is the approximate cap (XADD MAXLEN ~) of the events
	// stream. Default 10000.
	EventsMaxLen int64
	// SweepInterval is how often Run sweeps. Default 1s.
	SweepInterval time.Duration
	// Retention is how long an entry stays in status expired before the
	// sweeper removes it (blackboard.entry.removed {reason: "retention"}).
	// Default 1h (0 keeps the default); negative keeps expired entries
	// forever, as the original did. It is fixed per entry when the entry
	// becomes expired, so every Store of a board should use the same value.
	Retention time.Duration
}

const (
	defaultNamespace     = "default"
	defaultMaxEntries    = 10000
	defaultEventsMaxLen  = 10000
	defaultSweepInterval = time.Second
	defaultRetention     = time.Hour
)

package jobs

import (
	"log/slog"
	"time"

	"github.com/computeboard/computeboard/internal/clock"
)

// Config configures a Store. The zero value is usable; each field's
// comment gives its default. New fills the defaults and validates once.
type Config struct {
	// Retention is how long a terminal job's record P:job:<id> and the
	// idempotency key that maps to it are kept after the job ends; while a
	// job is active neither expires. It is fixed when the job ends, so
	// every Store of a board should use the same value. Default 7 days;
	// negative: kept forever.
	Retention time.Duration
	// Clock supplies every timestamp. Default clock.Real{}.
	Clock clock.Clock
	// Logger receives warnings (an entry or event not written after the
	// record changed). Default: discard.
	Logger *slog.Logger
}

const defaultRetention = 7 * 24 * time.Hour

func (c *Config) fill() {
	if c.Retention == 0 {
		c.Retention = defaultRetention
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

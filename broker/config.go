package broker

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/computeboard/computeboard/internal/clock"
	"github.com/computeboard/computeboard/wire"
)

// Config configures a Broker. The zero value is usable; each field's
// comment gives its default. New fills the defaults and validates once.
type Config struct {
	// Consumer is this broker's name in the consumer group. Give every
	// broker a distinct, stable name: after a restart under the same name it
	// re-reads its own pending requests at once instead of waiting ClaimIdle.
	// Default "<hostname>-<pid>".
	Consumer string

	// InboxCapacity bounds the requests held in memory (queued plus handed
	// out). When it is reached the broker stops reading: the rest wait,
	// safe, in the Redis lanes. Default 10000.
	InboxCapacity int
	// LeaseTimeout is how long a request handed out by Next may go without
	// Accept, Release or Reject before it is handed out again. Default 30s.
	LeaseTimeout time.Duration
	// ClaimIdle is how long a delivered request may sit unacknowledged in
	// another consumer's pending list before this broker takes it over
	// (XAUTOCLAIM). A broker refreshes the requests it holds every
	// ClaimIdle/3, so only a dead or partitioned broker's requests go idle.
	// Default 60s.
	ClaimIdle time.Duration
	// DeliveryLimit: a request delivered more than this many times (crashes,
	// reclaims, lapsed leases) is dead-lettered with code delivery_limit.
	// Default 5.
	DeliveryLimit int

	// ModuleRate is each source module's sustained admission rate, requests
	// per second (token bucket); a request over it is rejected with
	// rate_limited. Default 100; negative means unlimited.
	ModuleRate float64
	// ModuleBurst is the token bucket's size. Default 2×ModuleRate (at least 1).
	ModuleBurst int
	// ModuleMaxWaiting caps one module's requests held in the inbox; a new
	// request over it is rejected with inbox_full. Default InboxCapacity/4;
	// negative means no per-module cap (InboxCapacity still applies).
	ModuleMaxWaiting int

	// ReadBlock is how long one XREADGROUP waits for new requests. It bounds
	// how quickly Run notices cancellation. Default 1s.
	ReadBlock time.Duration
	// ReclaimInterval is how often Run looks for idle requests to take over
	// and refreshes its own. Default ClaimIdle/3.
	ReclaimInterval time.Duration
	// ExpiryInterval is how often Run expires requests whose TTL lapsed in
	// the inbox and dead-letters leases past DeliveryLimit. Default 1s.
	ExpiryInterval time.Duration

	// OperatorToken guards the mutating operator endpoints (POST, DELETE):
	// they need "Authorization: Bearer <OperatorToken>". Default "": those
	// endpoints answer 403 and only reads are served.
	OperatorToken string

	// Check is the adapter's admission hook, run on every decoded request
	// before it enters the inbox (templates, allowlist, impossible
	// requests). A non-nil *wire.Error rejects the request with its code.
	// Default nil: no extra checks.
	Check func(wire.Request) *wire.Error
	// OnCancel is called when a request that has already been handed out is
	// retracted by its poster, so the adapter can stop the job. It runs on
	// Run's event loop: it must not block. Default nil.
	OnCancel func(Cancel)

	// Clock supplies every timestamp. Default clock.Real{}.
	Clock clock.Clock
	// Logger receives warnings. Default: discard.
	Logger *slog.Logger
}

// Cancel tells the adapter that the poster retracted a request whose job
// may be queued in the engine or running.
type Cancel struct {
	EntryID string // the request entry
	JobID   string // wire.JobID(EntryID)
}

func (c *Config) fill() error {
	if c.Consumer == "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "broker"
		}
		c.Consumer = host + "-" + strconv.Itoa(os.Getpid())
	}
	if c.InboxCapacity == 0 {
		c.InboxCapacity = 10000
	}
	if c.LeaseTimeout == 0 {
		c.LeaseTimeout = 30 * time.Second
	}
	if c.ClaimIdle == 0 {
		c.ClaimIdle = 60 * time.Second
	}
	if c.DeliveryLimit == 0 {
		c.DeliveryLimit = 5
	}
	if c.ModuleRate == 0 {
		c.ModuleRate = 100
	}
	if c.ModuleBurst == 0 {
		c.ModuleBurst = max(1, int(2*c.ModuleRate))
	}
	if c.ModuleMaxWaiting == 0 {
		c.ModuleMaxWaiting = max(1, c.InboxCapacity/4)
	}
	if c.ReadBlock == 0 {
		c.ReadBlock = time.Second
	}
	if c.ReclaimInterval == 0 {
		c.ReclaimInterval = c.ClaimIdle / 3
	}
	if c.ExpiryInterval == 0 {
		c.ExpiryInterval = time.Second
	}
	if c.Clock == nil {
		c.Clock = clock.Real{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.InboxCapacity < 0:
		return fmt.Errorf("broker: config: InboxCapacity %d < 0", c.InboxCapacity)
	case c.LeaseTimeout < 0, c.ClaimIdle < 0, c.ReadBlock < 0, c.ReclaimInterval < 0, c.ExpiryInterval < 0:
		return fmt.Errorf("broker: config: negative duration")
	case c.DeliveryLimit < 0:
		return fmt.Errorf("broker: config: DeliveryLimit %d < 0", c.DeliveryLimit)
	case c.ModuleBurst < 0:
		return fmt.Errorf("broker: config: ModuleBurst %d < 0", c.ModuleBurst)
	case c.ClaimIdle < time.Millisecond:
		return fmt.Errorf("broker: config: ClaimIdle %v under 1ms", c.ClaimIdle)
	}
	return nil
}

package broker

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/computeboard/computeboard/internal/clock"
	"github.com/computeboard/computeboard/jobs"
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

	// Identity says where a request's module comes from: IdentityTrusted
	// (the entry's source_module; the legacy shared lanes are read as well
	// as the per-module lanes: a board without Redis ACLs) or IdentityACL
	// (the intake lane's key, which each module's ACL user is confined to;
	// only per-module lanes are read, and a request whose source_module or
	// entry id names another module is refused with identity_mismatch).
	// Default IdentityTrusted.
	Identity string
	// MayBill reports whether module may bill account (a request's
	// data.account; its default is the module itself). A refused request is
	// rejected with account_not_allowed. Default nil: with IdentityACL a
	// module may bill only its own account; with IdentityTrusted any.
	MayBill func(module, account string) bool
	// CancelCheckInterval is how often Run re-reads the request entry status
	// of every active job, so that a retraction written as a plain status
	// change (no event), or one whose event was missed, still cancels the
	// job. Default 2s; with more than a thousand active jobs the passes
	// spread out to read at most cancelCheckRate keys a second.
	CancelCheckInterval time.Duration

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

	// OperatorToken guards the mutating operator endpoints (POST, DELETE)
	// and the reads that expose request payloads or environments (one held
	// request, the dead letters): they need "Authorization: Bearer
	// <OperatorToken>". Default "": those endpoints answer 403 and only the
	// non-sensitive reads are served.
	OperatorToken string
	// PublicReads serves every read endpoint without a token. Environment
	// values are still redacted for callers without the token. Default
	// false.
	PublicReads bool

	// DLQMaxLen caps the dead-letter stream's length: each new dead letter
	// trims the oldest beyond it. Default 100000; negative: no cap.
	DLQMaxLen int
	// DLQMaxAge drops dead letters older than this (by stream id) whenever
	// a dead letter is written. Default 7 days; negative: no age limit.
	DLQMaxAge time.Duration
	// DLQEntryBytes is how much of a refused entry a dead letter keeps
	// verbatim; a longer one keeps its first DLQEntryBytes bytes, its size
	// and its sha256, and cannot be replayed. Default 16 KiB.
	DLQEntryBytes int
	// MaxMessageBytes and MaxReadBytes bound what one intake read may hold:
	// a read takes at most MaxReadBytes/MaxMessageBytes messages, and a
	// message field over MaxMessageBytes is never held whole: it is
	// streamed through sha256 as it arrives, only its first DLQEntryBytes
	// are kept, and the request is dead-lettered payload_too_large with its
	// size and digest. Default MaxMessageBytes 260 KiB (wire.MaxEntryBytes
	// plus the message's other fields), MaxReadBytes 64 MiB (252 messages
	// a read).
	MaxMessageBytes int
	MaxReadBytes    int
	// MetricsTopModules bounds the module label of the per-module metrics:
	// the K modules holding the most requests get their own series, the
	// rest are summed under module="_other" (OtherModules). Default 20.
	MetricsTopModules int

	// Check is the adapter's admission hook, run on every decoded request
	// before it enters the inbox (templates, allowlist, impossible
	// requests). A non-nil *wire.Error rejects the request with its code.
	// Default nil: no extra checks.
	Check func(wire.Request) *wire.Error
	// OnCancel is called when a request that has already been handed out is
	// retracted by its poster, so the adapter can stop the job. It runs on
	// Run's event loop: it must not block. Default nil.
	OnCancel func(Cancel)

	// Jobs is the job record store the broker accepts into, and whose
	// records it ends and marks cancel_requested; its Config sets the
	// records' retention. Pass the store the rest of the process uses (the
	// dispatcher's, the HTTP API's), so there is one. Default: one made by
	// New with jobs' defaults and this Clock and Logger.
	Jobs *jobs.Store

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
	if c.Identity == "" {
		c.Identity = IdentityTrusted
	}
	if c.CancelCheckInterval == 0 {
		c.CancelCheckInterval = 2 * time.Second
	}
	if c.DLQMaxLen == 0 {
		c.DLQMaxLen = 100000
	}
	if c.DLQMaxAge == 0 {
		c.DLQMaxAge = 7 * 24 * time.Hour
	}
	if c.DLQEntryBytes == 0 {
		c.DLQEntryBytes = 16 << 10
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = wire.MaxEntryBytes + 4<<10
	}
	if c.MaxReadBytes == 0 {
		c.MaxReadBytes = 64 << 20
	}
	if c.MetricsTopModules == 0 {
		c.MetricsTopModules = 20
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
	case c.DLQEntryBytes < 0, c.MaxMessageBytes < 0, c.MaxReadBytes < 0, c.MetricsTopModules < 0:
		return fmt.Errorf("broker: config: negative byte or label bound")
	case c.MaxReadBytes < c.MaxMessageBytes:
		return fmt.Errorf("broker: config: MaxReadBytes %d < MaxMessageBytes %d", c.MaxReadBytes, c.MaxMessageBytes)
	case c.Identity != IdentityTrusted && c.Identity != IdentityACL:
		return fmt.Errorf("broker: config: Identity %q, want %q or %q", c.Identity, IdentityTrusted, IdentityACL)
	case c.CancelCheckInterval < 0:
		return fmt.Errorf("broker: config: negative CancelCheckInterval")
	case c.ClaimIdle < time.Millisecond:
		return fmt.Errorf("broker: config: ClaimIdle %v under 1ms", c.ClaimIdle)
	}
	return nil
}

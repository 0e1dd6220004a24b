package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/clock"
)

// Leader is the scheduler that holds the lease.
type Leader struct {
	Epoch  int64  `json:"epoch"`  // fencing epoch of its election
	Holder string `json:"holder"` // the candidate's id
	URL    string `json:"url"`    // its HTTP API ("" = none), for redirects
}

// Fence is what a scheduler's writes carry: the epoch key and the epoch it
// was elected with.
type Fence struct {
	Key   string
	Epoch int64
}

// ElectorConfig configures one scheduler candidate.
type ElectorConfig struct {
	ID     string        // unique per process (a restarted adapter is a new candidate)
	URL    string        // this adapter's HTTP API, published with the lease
	TTL    time.Duration // lease time; default 10 s
	Clock  clock.Clock   // default clock.Real
	Logger *slog.Logger  // default slog.Default()
}

// Elector campaigns for the scheduler lease and runs the scheduler while it
// holds it.
type Elector struct {
	rdb   redis.UniversalClient
	lease string
	epoch string
	cfg   ElectorConfig
}

// NewElector returns a candidate on the board whose keys are k.
func NewElector(rdb redis.UniversalClient, k blackboard.Keys, cfg ElectorConfig) (*Elector, error) {
	if cfg.ID == "" || strings.ContainsAny(cfg.ID, " \t\n") {
		return nil, fmt.Errorf("pool: elector id %q: want a non-empty id without spaces", cfg.ID)
	}
	if strings.ContainsAny(cfg.URL, " \t\n") {
		return nil, fmt.Errorf("pool: elector url %q has spaces", cfg.URL)
	}
	if cfg.TTL <= 0 {
		cfg.TTL = 10 * time.Second
	}
	if cfg.TTL < 300*time.Millisecond {
		return nil, fmt.Errorf("pool: lease time %v: want at least 300ms", cfg.TTL)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Elector{rdb: rdb, lease: k.PoolLease(), epoch: k.PoolEpoch(), cfg: cfg}, nil
}

// FenceKey is the key every fenced write checks.
func (e *Elector) FenceKey() string { return e.epoch }

// TryAcquire takes the lease if it is free (or already ours). ok is false
// when another candidate holds it; l is then that holder.
func (e *Elector) TryAcquire(ctx context.Context) (l Leader, ok bool, err error) {
	res, err := scriptAcquire.Run(ctx, e.rdb, []string{e.lease, e.epoch},
		e.cfg.ID, e.cfg.URL, e.cfg.TTL.Milliseconds()).Slice()
	if err != nil {
		return Leader{}, false, fmt.Errorf("pool: acquire lease: %w", err)
	}
	ep, _ := res[0].(int64)
	if ep == 0 {
		s, _ := res[1].(string)
		l, _ := parseLease(s)
		return l, false, nil
	}
	return Leader{Epoch: ep, Holder: e.cfg.ID, URL: e.cfg.URL}, true, nil
}

// Renew extends a lease held at epoch; false when it was lost.
func (e *Elector) Renew(ctx context.Context, epoch int64) (bool, error) {
	n, err := scriptRenew.Run(ctx, e.rdb, []string{e.lease, e.epoch}, epoch, e.cfg.ID, e.cfg.TTL.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("pool: renew lease: %w", err)
	}
	return n == 1, nil
}

// Release gives up a lease held at epoch, so a standby takes over at once.
func (e *Elector) Release(ctx context.Context, epoch int64) error {
	return scriptRelease.Run(ctx, e.rdb, []string{e.lease}, epoch, e.cfg.ID).Err()
}

// Current returns the lease holder; ok false when nobody holds it.
func (e *Elector) Current(ctx context.Context) (Leader, bool, error) {
	return CurrentLeader(ctx, e.rdb, e.lease)
}

// CurrentLeader reads the lease at leaseKey (blackboard.Keys.PoolLease).
func CurrentLeader(ctx context.Context, rdb redis.UniversalClient, leaseKey string) (Leader, bool, error) {
	s, err := rdb.Get(ctx, leaseKey).Result()
	if errors.Is(err, redis.Nil) {
		return Leader{}, false, nil
	}
	if err != nil {
		return Leader{}, false, fmt.Errorf("pool: read lease: %w", err)
	}
	l, err := parseLease(s)
	return l, err == nil, err
}

func parseLease(s string) (Leader, error) {
	f := strings.SplitN(s, " ", 3)
	if len(f) < 2 {
		return Leader{}, fmt.Errorf("pool: malformed lease %q", s)
	}
	ep, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return Leader{}, fmt.Errorf("pool: malformed lease %q", s)
	}
	l := Leader{Epoch: ep, Holder: f[1]}
	if len(f) == 3 {
		l.URL = f[2]
	}
	return l, nil
}

// Run campaigns until ctx is done. Whenever this candidate wins the lease
// it calls lead (an error from lead is logged, and the candidate
// campaigns again) with a context that is cancelled as soon as the lease is
// lost (or cannot be renewed for two thirds of its time, so a scheduler
// cut off from Redis stops before a standby can be elected) and waits for
// lead to return before campaigning again. On the way out it releases the
// lease, so a standby takes over at once after a clean stop.
func (e *Elector) Run(ctx context.Context, lead func(ctx context.Context, l Leader) error) error {
	ttl := e.cfg.TTL
	poll := min(ttl/10, time.Second)
	log := e.cfg.Logger
	for {
		l, ok, err := e.TryAcquire(ctx)
		if err != nil && ctx.Err() == nil {
			log.Warn("scheduler lease", "err", err)
		}
		if ok {
			log.Info("elected scheduler", "epoch", l.Epoch)
			if err := e.hold(ctx, l, lead); err != nil && ctx.Err() == nil {
				log.Error("scheduler stopped; campaigning again", "epoch", l.Epoch, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(poll):
		}
	}
}

// hold runs lead while renewing the lease every third of its time.
func (e *Elector) hold(ctx context.Context, l Leader, lead func(ctx context.Context, l Leader) error) error {
	lctx, cancel := context.WithCancelCause(ctx)
	done := make(chan error, 1)
	go func() { done <- lead(lctx, l) }()
	ttl := e.cfg.TTL
	tick := time.NewTicker(ttl / 3)
	defer tick.Stop()
	lastOK := e.cfg.Clock.Now()
	stepDown := func(why error) {
		e.cfg.Logger.Warn("stepping down as scheduler", "epoch", l.Epoch, "why", why)
		cancel(why)
	}
	for {
		select {
		case err := <-done:
			cancel(nil)
			rctx, rc := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_ = e.Release(rctx, l.Epoch)
			rc()
			return err
		case <-tick.C:
			if lctx.Err() != nil {
				continue // waiting for lead to return
			}
			rctx, rc := context.WithTimeout(ctx, ttl/3)
			ok, err := e.Renew(rctx, l.Epoch)
			rc()
			switch {
			case err == nil && ok:
				lastOK = e.cfg.Clock.Now()
			case err == nil:
				stepDown(errors.New("lease lost to another scheduler"))
			case e.cfg.Clock.Now().Sub(lastOK) > 2*ttl/3:
				stepDown(fmt.Errorf("lease not renewed for %v: %w", e.cfg.Clock.Now().Sub(lastOK).Round(time.Millisecond), err))
			default:
				e.cfg.Logger.Warn("renew scheduler lease", "err", err)
			}
		}
	}
}

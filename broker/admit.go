package broker

import (
	"fmt"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/time/rate"

	"github.com/computeboard/computeboard/wire"
)

// maxTrackedModules bounds the per-module token buckets kept in memory.
// Source module names come from posters, so the map must not grow with
// them; a module evicted from the LRU starts again with a full bucket.
const maxTrackedModules = 4096

// admission applies the per-module limits to new requests: a cap on
// requests held in the inbox (inbox_full) and a token bucket (rate_limited).
// It is safe for concurrent use (the LRU locks itself).
type admission struct {
	limit      rate.Limit // per module; rate.Inf = unlimited
	burst      int
	maxWaiting int // per module; < 0 = unlimited
	buckets    *lru.Cache[string, *rate.Limiter]
}

func newAdmission(cfg Config) *admission {
	a := &admission{limit: rate.Limit(cfg.ModuleRate), burst: cfg.ModuleBurst, maxWaiting: cfg.ModuleMaxWaiting}
	if cfg.ModuleRate < 0 {
		a.limit = rate.Inf
	}
	a.buckets, _ = lru.New[string, *rate.Limiter](maxTrackedModules) // size > 0: no error
	return a
}

// admit decides on one new request of module, which already holds waiting
// requests in the inbox. A nil result admits it and spends a token.
func (a *admission) admit(module string, waiting int, now time.Time) *wire.Error {
	if a.maxWaiting >= 0 && waiting >= a.maxWaiting {
		return &wire.Error{Code: wire.CodeInboxFull, Message: fmt.Sprintf(
			"module %q already has %d requests waiting in the inbox (limit %d)", module, waiting, a.maxWaiting)}
	}
	if a.limit == rate.Inf {
		return nil
	}
	b, ok := a.buckets.Get(module)
	if !ok {
		b = rate.NewLimiter(a.limit, a.burst)
		a.buckets.Add(module, b)
	}
	if !b.AllowN(now, 1) {
		return &wire.Error{Code: wire.CodeRateLimited, Message: fmt.Sprintf(
			"module %q is over its admission rate (%g requests/s, burst %d)", module, float64(a.limit), a.burst)}
	}
	return nil
}

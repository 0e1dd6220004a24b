// Package ttlcache keeps values for a fixed time, on a clock the caller
// passes in: lookups that are slow, on a task's path, and whose answer
// may change (a user in the user database, a directory's permissions),
// kept long enough to spare most lookups and short enough that a change
// is seen soon. Only what the caller puts is kept, so a failed lookup,
// never put, is tried again at once.
package ttlcache

import (
	"sync"
	"time"
)

// Cache maps keys to values, each for TTL from when it was put. It holds
// at most Max (a Max of 0: 256); putting a key more drops all of them,
// which for the few users a node's tasks run as never happens. The zero
// Cache is not usable: set TTL. A Cache is safe for concurrent use.
type Cache[K comparable, V any] struct {
	TTL time.Duration
	Max int

	mu sync.Mutex
	m  map[K]entry[V]
}

type entry[V any] struct {
	v  V
	at time.Time
}

// Get returns the value put for k within TTL before now (and not after
// now: a clock set back ends every entry).
func (c *Cache[K, V]) Get(k K, now time.Time) (V, bool) {
	c.mu.Lock()
	e, ok := c.m[k]
	c.mu.Unlock()
	if !ok || now.Sub(e.at) >= c.TTL || now.Before(e.at) {
		var zero V
		return zero, false
	}
	return e.v, true
}

// Put keeps v for k from now.
func (c *Cache[K, V]) Put(k K, v V, now time.Time) {
	limit := c.Max
	if limit <= 0 {
		limit = 256
	}
	c.mu.Lock()
	if _, in := c.m[k]; !in && len(c.m) >= limit || c.m == nil {
		c.m = make(map[K]entry[V])
	}
	c.m[k] = entry[V]{v: v, at: now}
	c.mu.Unlock()
}

// Load returns k's value within TTL, else load's, which it keeps when
// load succeeds. Two callers that miss at once both load.
func (c *Cache[K, V]) Load(k K, now time.Time, load func() (V, error)) (V, error) {
	if v, ok := c.Get(k, now); ok {
		return v, nil
	}
	v, err := load()
	if err != nil {
		return v, err
	}
	c.Put(k, v, now)
	return v, nil
}

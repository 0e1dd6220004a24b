// Package clock is the one way computeboard reads the time outside the
// engine. Components take a Clock; production passes Real, tests pass a Fake.
// The engine never reads a clock: it gets Now in its Snapshot.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time. It deliberately has no timers: loops that wait use
// time.Ticker/time.After and are tested with testing/synctest.
type Clock interface {
	Now() time.Time
}

// Real is the wall clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// Fake is a settable clock for tests. The zero value starts at the Unix epoch.
type Fake struct {
	mu  sync.Mutex
	now time.Time // guarded by mu
}

// NewFake returns a Fake set to t.
func NewFake(t time.Time) *Fake { return &Fake{now: t} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.now.IsZero() {
		return time.Unix(0, 0)
	}
	return f.now
}

// Set moves the clock to t.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	f.now = t
	f.mu.Unlock()
}

// Advance moves the clock forward by d.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	if f.now.IsZero() {
		f.now = time.Unix(0, 0)
	}
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

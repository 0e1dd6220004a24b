package ttlcache

import (
	"errors"
	"testing"
	"time"
)

func TestGetWithinTTL(t *testing.T) {
	c := Cache[string, int]{TTL: 5 * time.Second}
	t0 := time.Unix(1000, 0)
	if _, ok := c.Get("a", t0); ok {
		t.Fatal("empty cache answered")
	}
	c.Put("a", 1, t0)
	for _, tc := range []struct {
		at time.Duration
		ok bool
	}{{0, true}, {4999 * time.Millisecond, true}, {5 * time.Second, false}, {time.Hour, false}, {-time.Millisecond, false}} {
		v, ok := c.Get("a", t0.Add(tc.at))
		if ok != tc.ok || ok && v != 1 {
			t.Errorf("Get at %v: %d, %v; want ok=%v", tc.at, v, ok, tc.ok)
		}
	}
}

func TestLoadKeepsOnlySuccess(t *testing.T) {
	c := Cache[string, int]{TTL: time.Second}
	t0 := time.Unix(1000, 0)
	calls := 0
	fail := func() (int, error) { calls++; return 0, errors.New("no") }
	ok := func() (int, error) { calls++; return 7, nil }
	if _, err := c.Load("k", t0, fail); err == nil {
		t.Fatal("failed load returned no error")
	}
	if v, err := c.Load("k", t0, ok); err != nil || v != 7 || calls != 2 {
		t.Fatalf("after a failure: %d, %v, %d calls; want 7 loaded again (2 calls)", v, err, calls)
	}
	if v, err := c.Load("k", t0.Add(999*time.Millisecond), fail); err != nil || v != 7 || calls != 2 {
		t.Fatalf("within TTL: %d, %v, %d calls; want 7 kept", v, err, calls)
	}
	if _, err := c.Load("k", t0.Add(time.Second), fail); err == nil || calls != 3 {
		t.Fatalf("after TTL: err %v, %d calls; want a new load", err, calls)
	}
}

func TestMaxDropsAll(t *testing.T) {
	c := Cache[int, int]{TTL: time.Hour, Max: 2}
	t0 := time.Unix(1000, 0)
	c.Put(1, 1, t0)
	c.Put(2, 2, t0)
	c.Put(2, 3, t0) // a key already held: nothing dropped
	if v, ok := c.Get(1, t0); !ok || v != 1 {
		t.Fatal("putting a held key dropped the others")
	}
	c.Put(3, 3, t0)
	if _, ok := c.Get(1, t0); ok {
		t.Fatal("a third key kept the first: the cache grows past Max")
	}
	if v, ok := c.Get(3, t0); !ok || v != 3 {
		t.Fatal("the key put last is not kept")
	}
}

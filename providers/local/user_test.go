package local

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/computeboard/computeboard/internal/clock"
)

// TestAccountCached: a user is looked up once per accountTTL, a failed
// lookup every time; the work directory's reach is checked once per
// accountTTL while it passes, and every time while it fails.
func TestAccountCached(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	p := newDirectProvider(t, Config{WorkDir: workDir(t), Clock: clk})
	calls := map[string]int{}
	p.accounts.resolve = func(name string) (account, error) {
		calls[name]++
		if name == "gone" {
			return account{}, errors.New("no such user")
		}
		return account{name: name, uid: 4242, gid: 4242, groups: []uint32{uint32(4242 + calls[name])}}, nil
	}
	a1, err := p.account("x")
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(accountTTL - 1)
	if a2, err := p.account("x"); err != nil || calls["x"] != 1 || a2.groups[0] != a1.groups[0] {
		t.Fatalf("within the TTL: %+v %v after %d lookups, want the first (%+v) after 1", a2, err, calls["x"], a1)
	}
	clk.Advance(1)
	if a3, err := p.account("x"); err != nil || calls["x"] != 2 || a3.groups[0] == a1.groups[0] {
		t.Fatalf("after the TTL: %+v %v after %d lookups, want a new one", a3, err, calls["x"])
	}
	for range 2 {
		if _, err := p.account("gone"); err == nil {
			t.Fatal("a failed lookup served as an account")
		}
	}
	if calls["gone"] != 2 {
		t.Fatalf("failed lookups: %d, want 2 (not kept)", calls["gone"])
	}

	// Reach: a work directory this test's own user can pass (its owner
	// bits, and the system's directories above it), then cannot.
	top, err := os.MkdirTemp("", "reach")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(top, 0o700); os.RemoveAll(top) })
	wd := filepath.Join(top, "work")
	if err := os.Mkdir(wd, 0o755); err != nil {
		t.Fatal(err)
	}
	owner := account{name: "owner", uid: uint32(os.Getuid()), gid: uint32(os.Getgid()), groups: []uint32{uint32(os.Getgid())}}
	if err := owner.checkReachable(wd); err != nil {
		t.Fatalf("the test's own directory out of its user's reach: %v", err)
	}
	p.workDir = wd
	if err := p.reachable(owner); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(top, 0o600); err != nil { // not searchable, even by its owner
		t.Fatal(err)
	}
	if err := p.reachable(owner); err != nil {
		t.Fatalf("within the TTL of a passed check: %v, want it kept", err)
	}
	clk.Advance(accountTTL)
	for range 2 {
		if err := p.reachable(owner); err == nil {
			t.Fatal("after the TTL the closed directory was not seen")
		}
	}
	if err := os.Chmod(top, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := p.reachable(owner); err != nil {
		t.Fatalf("a failed check was kept: %v", err)
	}
}

package redistest

import (
	"testing"
)

func TestMain(m *testing.M) { Main(m) }

func TestNamespacesDiffer(t *testing.T) {
	t.Parallel()
	c, a := New(t)
	_, b := New(t)
	if a == b {
		t.Fatalf("two namespaces are equal: %q", a)
	}
	if err := c.Set(t.Context(), a+":k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got := c.Get(t.Context(), a+":k").Val(); got != "v" {
		t.Fatalf("got %q", got)
	}
}

func TestRestartKeepsAOFData(t *testing.T) {
	t.Parallel()
	s := StartT(t, Options{AOF: true, TCP: true})
	c := s.Client(t)
	if err := c.Set(t.Context(), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(t.Context(), "k").Result(); err != nil || got != "v" {
		t.Fatalf("after restart: got %q, %v; want v", got, err)
	}
}

package adapter

import (
	"net"
	"strings"
	"testing"
	"time"
)

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://:s3cret@127.0.0.1:6379/0":        "redis://:xxxxx@127.0.0.1:6379/0",
		"rediss://user:s3cret@host:6380":          "rediss://user:xxxxx@host:6380",
		"redis://host1:6379?addr=host2:6379":      "redis://host1:6379?addr=host2:6379",
		"unix:///run/redis.sock":                  "unix:///run/redis.sock",
		"redis://:s3cret@[bad":                    "redis://…",
		"unix://user:s3cret@/run/redis.sock?db=1": "unix://user:xxxxx@/run/redis.sock?db=1",
	} {
		got := redactURL(in)
		if got != want || strings.Contains(got, "s3cret") {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestConnectionCap: past the cap, a connection is not accepted until
// another closes.
func TestConnectionCap(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := newLimitListener(inner, 2)
	defer ln.Close()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	for range 3 {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	first, second := <-accepted, <-accepted
	select {
	case <-accepted:
		t.Fatal("a third connection was accepted over a cap of 2")
	case <-time.After(100 * time.Millisecond): // nothing to wait for: a negative check
	}
	first.Close()
	first.Close() // closing twice releases once
	<-accepted    // the third is accepted once one closes
	second.Close()
}

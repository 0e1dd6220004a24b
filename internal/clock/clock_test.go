package clock

import (
	"testing"
	"time"
)

func TestFake(t *testing.T) {
	var f Fake
	if got, want := f.Now(), time.Unix(0, 0); !got.Equal(want) {
		t.Fatalf("zero Fake: got %v want %v", got, want)
	}
	f.Advance(time.Second)
	if got, want := f.Now(), time.Unix(1, 0); !got.Equal(want) {
		t.Fatalf("Advance: got %v want %v", got, want)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f.Set(at)
	if got := f.Now(); !got.Equal(at) {
		t.Fatalf("Set: got %v want %v", got, at)
	}
}

func TestRealMovesForward(t *testing.T) {
	a := Real{}.Now()
	b := Real{}.Now()
	if b.Before(a) {
		t.Fatalf("Real clock went backwards: %v then %v", a, b)
	}
}

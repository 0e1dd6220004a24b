package blackboard

import (
	"strings"
	"testing"

	"github.com/computeboard/computeboard/internal/redistest"
)

func TestReadPersistence(t *testing.T) {
	// The shared test server runs without persistence; an AOF one with
	// appendfsync always is safe; everysec is not.
	p, err := ReadPersistence(t.Context(), redistest.Shared(t).Client(t))
	if err != nil {
		t.Fatal(err)
	}
	if p.AOF || p.Safe || p.Guarantee == "" {
		t.Errorf("shared server: %+v", p)
	}
	srv := redistest.StartT(t, redistest.Options{AOF: true})
	rdb := srv.Client(t)
	p, err = ReadPersistence(t.Context(), rdb)
	if err != nil {
		t.Fatal(err)
	}
	if !p.AOF || p.Fsync != "always" || !p.Safe || !strings.Contains(p.Guarantee, "loses nothing") {
		t.Errorf("AOF always: %+v", p)
	}
	if err := rdb.ConfigSet(t.Context(), "appendfsync", "everysec").Err(); err != nil {
		t.Fatal(err)
	}
	p, _ = ReadPersistence(t.Context(), rdb)
	if p.Safe || !strings.Contains(p.Guarantee, "run twice") {
		t.Errorf("AOF everysec: %+v", p)
	}
}

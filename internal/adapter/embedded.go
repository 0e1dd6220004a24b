package adapter

import (
	"fmt"

	"github.com/alicebob/miniredis/v2"
)

// embeddedServer is the Redis-protocol blackboard that `make run` serves
// when no --redis URL is given: an in-process miniredis on a loopback
// address, so a Python module on the same machine can connect with
// redis-py. It keeps everything in memory; use a real Redis for
// durability.
type embeddedServer struct {
	m *miniredis.Miniredis
}

func startEmbedded(addr string) (*embeddedServer, error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr(addr); err != nil {
		return nil, fmt.Errorf("embedded blackboard on %s: %w (pick another with --embedded ADDR, or port 0 for any free one)", addr, err)
	}
	return &embeddedServer{m: m}, nil
}

func (e *embeddedServer) Addr() string { return e.m.Addr() }
func (e *embeddedServer) Close()       { e.m.Close() }

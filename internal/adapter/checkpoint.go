package adapter

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/computeboard/computeboard/engine"
	"github.com/computeboard/computeboard/jobs"
)

// checkpointer saves the engine's State (decayed usage, fair-queuing tags,
// DRR deficits) under the node's name, so fair share survives a restart.
// The blackboard stays the source of truth for jobs; this is only the
// engine's memory.
type checkpointer struct {
	jobs  *jobs.Store // SaveEngineState, LoadEngineState
	node  string
	disp  *dispatcher
	every time.Duration
	log   *slog.Logger
	saved time.Time // LastNow of the last saved state; owned by Run
}

// Load restores the node's last checkpoint, if any.
func (c *checkpointer) Load(ctx context.Context) error {
	b, err := c.jobs.LoadEngineState(ctx, c.node)
	if err != nil {
		return fmt.Errorf("load engine checkpoint: %w", err)
	}
	if b == nil {
		return nil
	}
	st, err := engine.UnmarshalState(b)
	if err != nil {
		// A checkpoint from a newer engine, or damaged: start fresh rather
		// than refuse to serve, and say so.
		c.log.Warn("ignoring engine checkpoint", "node", c.node, "err", err)
		return nil
	}
	c.disp.mu.Lock()
	c.disp.state = st
	c.disp.mu.Unlock()
	c.saved = st.LastNow
	return nil
}

// Run saves the state every interval when it changed, and once more on
// the way out.
func (c *checkpointer) Run(ctx context.Context) error {
	t := time.NewTicker(c.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			c.save(sctx)
			cancel()
			return nil
		case <-t.C:
			c.save(ctx)
		}
	}
}

func (c *checkpointer) save(ctx context.Context) {
	c.disp.mu.Lock()
	st := c.disp.state
	c.disp.mu.Unlock()
	if st.LastNow.IsZero() || st.LastNow.Equal(c.saved) {
		return
	}
	b, err := engine.MarshalState(st)
	if err != nil {
		c.log.Error("encode engine checkpoint", "err", err)
		return
	}
	if err := c.jobs.SaveEngineState(ctx, c.node, b); err != nil {
		c.log.Warn("save engine checkpoint", "err", err)
		return
	}
	c.saved = st.LastNow
}

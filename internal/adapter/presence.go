package adapter

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/internal/clock"
)

// presence is how adapters sharing a board know of each other: each one
// writes a heartbeat under its node name, and records which node holds
// each active job. A queued job is adopted by another adapter only when
// its holder has stopped beating, so live adapters do not plan each
// other's work; a running job whose node has been silent past NodeTimeout
// is ended as lost.
type presence struct {
	rdb       redis.UniversalClient
	adapters  string // blackboard.Keys.Adapters()
	owners    string // blackboard.Keys.JobsOwner()
	node      string
	consumer  string
	clock     clock.Clock
	every     time.Duration // heartbeat interval
	staleness time.Duration // a holder silent this long has gone away
	log       *slog.Logger
}

type heartbeat struct {
	Consumer string  `json:"consumer"`
	At       float64 `json:"at"` // epoch seconds
}

// Beat writes this adapter's heartbeat.
func (p *presence) Beat(ctx context.Context) error {
	b, _ := json.Marshal(heartbeat{Consumer: p.consumer, At: epochOf(p.clock.Now())})
	if err := p.rdb.HSet(ctx, p.adapters, p.node, b).Err(); err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	return nil
}

// Run beats every interval until ctx is done.
func (p *presence) Run(ctx context.Context) error {
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := p.Beat(ctx); err != nil && ctx.Err() == nil {
				p.log.Warn("heartbeat", "err", err)
			}
		}
	}
}

// Own records this node as the holder of jobs.
func (p *presence) Own(ctx context.Context, jobIDs ...string) error {
	if len(jobIDs) == 0 {
		return nil
	}
	args := make([]any, 0, 2*len(jobIDs))
	for _, id := range jobIDs {
		args = append(args, id, p.node)
	}
	return p.rdb.HSet(ctx, p.owners, args...).Err()
}

// Disown forgets the holder of ended jobs.
func (p *presence) Disown(ctx context.Context, jobIDs ...string) error {
	if len(jobIDs) == 0 {
		return nil
	}
	return p.rdb.HDel(ctx, p.owners, jobIDs...).Err()
}

// view returns the holder of each job ("" if none is recorded) and how
// long ago each node last beat (absent: never).
func (p *presence) view(ctx context.Context, jobIDs []string) (map[string]string, map[string]time.Duration, error) {
	owners := make(map[string]string, len(jobIDs))
	if len(jobIDs) > 0 {
		vals, err := p.rdb.HMGet(ctx, p.owners, jobIDs...).Result()
		if err != nil {
			return nil, nil, err
		}
		for i, v := range vals {
			if s, ok := v.(string); ok {
				owners[jobIDs[i]] = s
			}
		}
	}
	beats, err := p.rdb.HGetAll(ctx, p.adapters).Result()
	if err != nil {
		return nil, nil, err
	}
	now := p.clock.Now()
	silent := make(map[string]time.Duration, len(beats))
	for node, raw := range beats {
		var hb heartbeat
		if json.Unmarshal([]byte(raw), &hb) == nil {
			silent[node] = now.Sub(epochTime(hb.At))
		}
	}
	return owners, silent, nil
}

// gone reports whether node has been silent longer than limit (a node
// that never beat counts as gone).
func gone(silent map[string]time.Duration, node string, limit time.Duration) bool {
	d, ok := silent[node]
	return !ok || d > limit
}

func epochOf(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

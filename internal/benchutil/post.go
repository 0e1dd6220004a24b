package benchutil

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/clock"
)

// NewBoard returns a fresh board name (prefix-<pid>-<nanoseconds>) and a
// store that posts to it as modules do, with the adapter's default
// capacity. DropBoard deletes it after the run.
func NewBoard(rdb redis.UniversalClient, prefix string) (string, *blackboard.Store, error) {
	board := fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), time.Now().UnixNano())
	store, err := blackboard.New(rdb, blackboard.Config{Namespace: board, MaxEntries: 100000, Clock: clock.Real{},
		Logger: slog.New(slog.DiscardHandler)})
	return board, store, err
}

// PostSpread posts n compute.request entries with data from posters
// concurrent modules (poster0, poster1, …): request i from poster
// i%posters, each poster's in order. ids[i] is request i's entry ID.
func PostSpread(ctx context.Context, store *blackboard.Store, n, posters int, data []byte) ([]string, error) {
	ids := make([]string, n)
	g, gctx := errgroup.WithContext(ctx)
	for p := range posters {
		g.Go(func() error {
			for i := p; i < n; i += posters {
				id, err := store.Post(gctx, blackboard.NewEntry(blackboard.RequestTopic, fmt.Sprint("poster", p), data))
				if err != nil {
					return fmt.Errorf("post: %w", err)
				}
				ids[i] = id
			}
			return nil
		})
	}
	return ids, g.Wait()
}

// Percentile is the p-th percentile (nearest rank) of ds, which it
// leaves unsorted; ds must not be empty.
func Percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, (len(s)*p+99)/100-1)]
}

// EpochNS reads a job record's epoch-seconds field (as HMGET returns it)
// as Unix nanoseconds: 0 if absent or malformed.
func EpochNS(v any) int64 {
	s, _ := v.(string)
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0
	}
	return int64(math.Round(f * 1e9))
}

// Millis is d in milliseconds.
func Millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

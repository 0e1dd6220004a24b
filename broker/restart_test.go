package broker

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/clock"
	"github.com/computeboard/computeboard/internal/redistest"
)

// TestRedisRestartDuringIntake kills Redis (SIGKILL, AOF with fsync
// always) in the middle of a stream of posts while the broker reads and an
// adapter accepts, and checks that every request whose post Redis
// acknowledged ends up as exactly one job, with nothing left in the lanes.
func TestRedisRestartDuringIntake(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts a dedicated redis-server")
	}
	srv := redistest.StartT(t, redistest.Options{AOF: true, TCP: true})
	opts := srv.ClientOptions()
	opts.MaxRetries = -1 // the test's loops retry; keep each call short
	opts.DialTimeout, opts.ReadTimeout = 200*time.Millisecond, 2*time.Second
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	bd := boardOn(t, rdb, "restart")
	b := bd.broker(t, Config{ReadBlock: 50 * time.Millisecond, ClaimIdle: 300 * time.Millisecond,
		ReclaimInterval: 100 * time.Millisecond, LeaseTimeout: 300 * time.Millisecond, Clock: clock.Real{}})

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { _ = b.Run(ctx) })
	wg.Go(func() { // the adapter
		for {
			d, err := b.Next(ctx)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			_, _, _ = b.Accept(ctx, d) // on failure the lease lapses and it comes back
		}
	})

	const total, posters = 200, 4
	var mu sync.Mutex
	var posted []string
	restarted := make(chan struct{})
	var pw sync.WaitGroup
	for range posters {
		pw.Go(func() {
			for range total / posters {
				e := blackboard.NewEntry(blackboard.RequestTopic, "m", []byte(okData))
				e.ID = blackboard.NewID()
				for { // a poster retries with the same id until Redis answers
					if _, err := bd.store.PostIfAbsent(ctx, e); err == nil {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				mu.Lock()
				posted = append(posted, e.ID)
				if len(posted) == total/2 {
					close(restarted)
				}
				mu.Unlock()
				time.Sleep(time.Millisecond)
			}
		})
	}
	<-restarted
	if err := srv.Restart(); err != nil { // SIGKILL, then start on the same AOF
		t.Fatal(err)
	}
	pw.Wait()

	deadline := time.Now().Add(30 * time.Second)
	for {
		missing := 0
		for _, id := range posted {
			if _, err := rdb.Get(ctx, bd.keys.JobIdem("m", id)).Result(); errors.Is(err, redis.Nil) {
				missing++
			}
		}
		l, p := bd.laneTotals(t)
		if missing == 0 && l == 0 && p == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: %d of %d posted requests have no job; lanes hold %d (%d pending)", missing, total, l, p)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	if n := bd.idemKeys(t); n != total {
		t.Errorf("%d job records, want %d", n, total)
	}
	if n, _ := rdb.XLen(context.Background(), bd.keys.DLQ()).Result(); n != 0 {
		t.Errorf("%d dead letters", n)
	}
	s, _ := b.Inspector().Stats(context.Background())
	t.Logf("read %d, reclaimed %d, handed out %d, accepted %d", s.Read, s.Reclaimed, s.HandedOut, s.Accepted)
}

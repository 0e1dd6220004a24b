// Command asynq-peer is the same-run baseline for computeboard's intake in
// scripts/bench.sh: asynq's enqueue→handler on the same Redis. It is a
// benchmark-only module (its own go.mod), not a dependency of computeboard.
//
// -clients goroutines share one asynq.Client and enqueue -n tasks in all
// (as fast as they can, or -rate tasks/s together); one asynq.Server with
// -concurrency workers runs a handler that only records the time. It
// prints one line of key=value pairs: tasks_per_s is -n over the time from
// the first enqueue to the last handler's completion, p50_us/p99_us the
// enqueue→handler latency, and redis_cpu_us_per_task the Redis server's CPU
// time (INFO cpu, user + sys, before the first enqueue and after the last
// handler) per task: beside cmd/cbbench's redis_cpu_us_per_req, what each
// side asks of the one Redis they share.
//
// The server starts before the first enqueue. -check-interval is asynq's
// TaskCheckInterval, how long an idle worker sleeps before polling again
// (asynq's default, 1s, would put up to a second of sleep into every
// figure here); computeboard's intake blocks in XREADGROUP instead.
//
// With -pending it starts no server: it enqueues -n tasks (payload
// -payload, by default the same JSON as cmd/e2ebench's pending requests)
// and prints Redis's used_memory growth per pending task (INFO memory,
// before and after), the baseline of cmd/e2ebench's part=pending; then it
// deletes its queue.
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "asynq-peer:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("redis", "127.0.0.1:6379", "Redis address (host:port, or a socket path with -network unix)")
	network := flag.String("network", "tcp", "tcp or unix")
	clients := flag.Int("clients", 10, "concurrent enqueuers")
	n := flag.Int("n", 10000, "tasks in all")
	rate := flag.Float64("rate", 0, "tasks/s offered by all enqueuers together; 0: as fast as they can")
	concurrency := flag.Int("concurrency", 20, "asynq server workers")
	check := flag.Duration("check-interval", 10*time.Millisecond, "asynq TaskCheckInterval")
	timeout := flag.Duration("timeout", 5*time.Minute, "give up after this long")
	pending := flag.Bool("pending", false, "enqueue -n tasks with no server and report Redis bytes per pending task")
	payload := flag.String("payload", `{"resource_requirements":{"cpu_cores":1,"memory":0.0625},"template":"true"}`, "task payload with -pending")
	flag.Parse()
	if *clients < 1 || *n < 1 {
		return errors.New("-clients and -n must be at least 1")
	}

	opt := asynq.RedisClientOpt{Network: *network, Addr: *addr}
	// A queue of its own per run: nothing left from an earlier run is read.
	queue := fmt.Sprintf("bench-%d-%d", os.Getpid(), time.Now().UnixNano())
	if *pending {
		return pendingMemory(opt, queue, *clients, *n, []byte(*payload), *timeout)
	}

	sent := make([]atomic.Int64, *n) // unix ns just before Enqueue
	lat := make([]time.Duration, *n)
	var left atomic.Int64
	left.Store(int64(*n))
	done := make(chan struct{})
	var end time.Time
	mux := asynq.NewServeMux()
	mux.HandleFunc("bench", func(_ context.Context, t *asynq.Task) error {
		now := time.Now()
		i := binary.BigEndian.Uint64(t.Payload())
		lat[i] = time.Duration(now.UnixNano() - sent[i].Load())
		if left.Add(-1) == 0 {
			end = now
			close(done)
		}
		return nil
	})
	srv := asynq.NewServer(opt, asynq.Config{
		Concurrency:       *concurrency,
		Queues:            map[string]int{queue: 1},
		TaskCheckInterval: *check,
		LogLevel:          asynq.ErrorLevel,
	})
	if err := srv.Start(mux); err != nil {
		return err
	}
	defer srv.Shutdown()
	client := asynq.NewClient(opt)
	defer client.Close()
	rdb := opt.MakeRedisClient().(redis.UniversalClient)
	defer rdb.Close()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	cpu0, err := redisCPU(ctx, rdb)
	if err != nil {
		return err
	}
	start := time.Now()
	errs := make(chan error, *clients)
	var wg sync.WaitGroup
	for c := range *clients {
		wg.Go(func() {
			var payload [8]byte
			for i := c; i < *n; i += *clients {
				if *rate > 0 {
					due := start.Add(time.Duration(float64(i) / *rate * float64(time.Second)))
					if d := time.Until(due); d > 0 {
						time.Sleep(d)
					}
				}
				binary.BigEndian.PutUint64(payload[:], uint64(i))
				sent[i].Store(time.Now().UnixNano())
				if _, err := client.EnqueueContext(ctx, asynq.NewTask("bench", payload[:]), asynq.Queue(queue)); err != nil {
					errs <- fmt.Errorf("enqueue: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("%d of %d tasks not handled after %v", left.Load(), *n, *timeout)
	}
	cpu1, err := redisCPU(ctx, rdb)
	if err != nil {
		return err
	}
	elapsed := end.Sub(start)
	slices.Sort(lat)
	q := func(p float64) int64 { return lat[int(p*float64(len(lat)-1))].Microseconds() }
	fmt.Printf("side=asynq path=enqueue-to-handler clients=%d n=%d rate=%g concurrency=%d secs=%.3f tasks_per_s=%.0f p50_us=%d p99_us=%d redis_cpu_us_per_task=%.1f\n",
		*clients, *n, *rate, *concurrency, elapsed.Seconds(), float64(*n)/elapsed.Seconds(), q(0.50), q(0.99),
		float64((cpu1-cpu0).Microseconds())/float64(*n))
	return nil
}

// redisCPU is the Redis server's CPU time so far (INFO cpu: used_cpu_sys
// plus used_cpu_user). The handlers' completions come before the server's
// own bookkeeping of them (asynq acknowledges after the handler returns),
// so a few tasks' last writes may fall after the second reading.
func redisCPU(ctx context.Context, rdb redis.UniversalClient) (time.Duration, error) {
	secs, err := infoSum(ctx, rdb, "cpu", "used_cpu_sys", "used_cpu_user")
	return time.Duration(secs * float64(time.Second)), err
}

// pendingMemory enqueues n tasks, clients at a time, with no server
// running, and prints Redis's used_memory growth per task; then it deletes
// the queue.
func pendingMemory(opt asynq.RedisClientOpt, queue string, clients, n int, payload []byte, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	rdb := opt.MakeRedisClient().(redis.UniversalClient)
	defer rdb.Close()
	client := asynq.NewClient(opt)
	defer client.Close()
	defer func() { _ = asynq.NewInspector(opt).DeleteQueue(queue, true) }()
	before, err := usedMemory(ctx, rdb)
	if err != nil {
		return err
	}
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := c; i < n; i += clients {
				if _, err := client.EnqueueContext(ctx, asynq.NewTask("bench", payload), asynq.Queue(queue)); err != nil {
					errs <- fmt.Errorf("enqueue: %w", err)
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	after, err := usedMemory(ctx, rdb)
	if err != nil {
		return err
	}
	fmt.Printf("side=asynq path=pending n=%d payload_bytes=%d redis_bytes_per_task=%.0f\n", n, len(payload), float64(after-before)/float64(n))
	return nil
}

func usedMemory(ctx context.Context, rdb redis.UniversalClient) (int64, error) {
	b, err := infoSum(ctx, rdb, "memory", "used_memory")
	return int64(b), err
}

// infoSum is the sum of the named fields of INFO section; each must be
// there.
func infoSum(ctx context.Context, rdb redis.UniversalClient, section string, fields ...string) (float64, error) {
	info, err := rdb.Info(ctx, section).Result()
	if err != nil {
		return 0, err
	}
	var sum float64
	found := 0
	for _, l := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), ":")
		if ok && slices.Contains(fields, k) {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("INFO %s %s: %w", section, k, err)
			}
			sum += f
			found++
		}
	}
	if found != len(fields) {
		return 0, fmt.Errorf("INFO %s lacks some of %v", section, fields)
	}
	return sum, nil
}

package agent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/computeboard/computeboard/internal/clock"
	"github.com/computeboard/computeboard/inventory"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/pool"
	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/providers/fake"
	"github.com/computeboard/computeboard/wire"
)

// BenchmarkIdlePolling measures what the poll loop costs an agent with
// 20,000 running fake tasks (as cmd/poolbench's fake-node agent has) while
// none ends: the CPU time the process uses per second of the loop
// (cpu-ms/s), with the default Poll (and SafetyPoll), measured over 10 s
// of steady state.
func BenchmarkIdlePolling(b *testing.B) {
	const n = 20000
	prov := fake.New("fake", clock.Real{}, time.Hour)
	a, err := New(Config{
		Nodes:   []Node{{Record: pool.NodeRecord{Node: inventory.Node{Name: "n1"}}, Provider: prov}},
		Resolve: func(wire.Request) (Command, *wire.Error) { return Command{}, nil },
		Jobs:    (*jobs.Store)(nil), Channel: &pool.Channel{}, Registry: &pool.Registry{},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		id := fmt.Sprintf("job%05d", i)
		h, err := prov.Start(context.Background(), providers.Task{ID: TaskID(id, 1)})
		if err != nil {
			b.Fatal(err)
		}
		a.tasks[id] = &task{rec: jobs.Job{JobData: wire.JobData{JobID: id, Status: wire.JobRunning}}, node: "n1", handle: h, prov: prov}
	}
	var cpu, wall time.Duration
	for b.Loop() {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = a.pollLoop(ctx)
		}()
		time.Sleep(time.Second) // past the first tick's poll of every task
		c0, w0 := cpuTime(), time.Now()
		time.Sleep(10 * time.Second) // steady state: 2 SafetyPolls, or 50 Polls
		cpu += cpuTime() - c0
		wall += time.Since(w0)
		cancel()
		<-done
	}
	b.ReportMetric(float64(cpu.Microseconds())/1000/wall.Seconds(), "cpu-ms/s")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

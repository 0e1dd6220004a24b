package integration

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/internal/redistest"
	"github.com/computeboard/computeboard/wire"
)

// TestRedisCluster runs the adapter against a three-master Redis Cluster:
// every script touches only keys of one board, which share a hash tag, so
// nothing fails with CROSSSLOT.
func TestRedisCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	t.Parallel()
	cl := redistest.StartCluster(t)
	rdb := cl.Client(t)
	board := redistest.Namespace(t)
	st := storeFor(t, rdb, board)
	url := "redis://" + cl.Addrs[0] + "?addr=" + strings.Join(cl.Addrs[1:], "&addr=")
	cfg := smallNodeConfig(t, board, jobDir(t)+"/runs", "listen: off\n")
	runAdapter(t, "--config", cfg, "--redis", url)

	good := postData(t, st, "planner", `{"template":"count"}`, nil)
	bad := postData(t, st, "planner", `{"template":"nope"}`, nil)
	waitStatus(t, st, good, wire.JobSucceeded)
	waitStatus(t, st, bad, wire.JobRejected)

	// Queries, updates and supersede work across the board's keys.
	got, err := st.Query(t.Context(), blackboard.Query{Topics: []string{"compute"}})
	if err != nil || len(got) < 3 {
		t.Fatalf("query on the cluster: %d entries, %v", len(got), err)
	}
	e := blackboard.NewEntry("reasoning.inference", "reasoning", json.RawMessage(`{"x":1}`))
	id, err := st.Post(t.Context(), e)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Supersede(t.Context(), id, blackboard.NewEntry("reasoning.inference", "reasoning", json.RawMessage(`{"x":2}`))); err != nil {
		t.Fatalf("supersede on the cluster: %v", err)
	}
}

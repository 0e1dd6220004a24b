package adapter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/blackboard"
	"github.com/computeboard/computeboard/broker"
	"github.com/computeboard/computeboard/engine/sim"
	"github.com/computeboard/computeboard/internal/clock"
	"github.com/computeboard/computeboard/jobs"
	"github.com/computeboard/computeboard/pool"
	"github.com/computeboard/computeboard/wire"
)

// parseInterleaved parses flags that may come before, between or after
// positional arguments ("jobs list --redis URL"), returning the
// positionals.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// runPost posts a compute.request entry, as a module would with redis-py.
func runPost(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("post", flag.ContinueOnError)
	fs.SetOutput(stderr)
	redisURL := fs.String("redis", envOr(getenv, "COMPUTEBOARD_REDIS", "redis://127.0.0.1:6380"), "blackboard Redis URL")
	board := fs.String("board", "default", "blackboard namespace")
	module := fs.String("module", "operator", "source_module of the request")
	template := fs.String("template", "", "template name")
	var argv, command stringList
	fs.Var(&argv, "arg", "argument appended to the template (repeatable)")
	fs.Var(&command, "command", "raw argv element, argv[0] on the allowlist (repeatable)")
	prio := fs.Int("priority", -1, "request priority 0..9 (default from the entry priority)")
	entryPrio := fs.Int("entry-priority", 1, "blackboard priority LOW..CRITICAL = 0..3")
	ttl := fs.Float64("ttl", 0, "seconds the request may wait before it expires (0 = never)")
	wait := fs.Bool("wait", false, "wait for the job to end and print its entry")
	timeout := fs.Duration("timeout", time.Minute, "how long --wait waits")
	if err := fs.Parse(args); err != nil {
		return err
	}
	data := map[string]any{}
	if *template != "" {
		data["template"] = *template
	}
	if len(command) > 0 {
		data["command"] = []string(command)
	}
	if len(argv) > 0 {
		data["arguments"] = []string(argv)
	}
	if *prio >= 0 {
		data["priority"] = *prio
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return err
	}
	rdb, store, err := openStore(ctx, *redisURL, *board)
	if err != nil {
		return err
	}
	defer rdb.Close()
	e := blackboard.NewEntry(blackboard.RequestTopic, *module, raw)
	if blackboard.ValidModule(*module) {
		// The module's own id form, which a board with identity acl
		// requires (its ACL user may write only P:entry:<module>:*).
		e.ID = blackboard.NewModuleID(*module)
	}
	e.Priority = blackboard.Priority(*entryPrio)
	e.Tags = []string{"compute", "request"}
	if *ttl > 0 {
		e.TTLSeconds = ttl
	}
	id, err := store.Post(ctx, e)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "{\"request_entry_id\": %q, \"job_id\": %q}\n", id, wire.JobID(id))
	if !*wait {
		return nil
	}
	start := time.Now()
	deadline := start.Add(*timeout)
	last := wire.JobStatus("")
	for time.Now().Before(deadline) {
		var jd wire.JobData
		if je, err := store.Get(ctx, wire.JobID(id)); err == nil && json.Unmarshal(je.Data, &jd) == nil {
			if jd.Status != last {
				// Progress, on stderr: the job's status as it changes.
				last = jd.Status
				where := ""
				if jd.Node != "" {
					where = " on " + jd.Node
				}
				fmt.Fprintf(stderr, "%6.2fs  %s%s\n", time.Since(start).Seconds(), jd.Status, where)
			}
			if jd.Status.Terminal() {
				out, _ := json.MarshalIndent(jd, "", "  ")
				fmt.Fprintln(stdout, string(out))
				if jd.Status != wire.JobSucceeded {
					return fmt.Errorf("job %s ended %s", jd.JobID, jd.Status)
				}
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("job %s did not end within %v", wire.JobID(id), *timeout)
}

func openStore(ctx context.Context, redisURL, board string) (redis.UniversalClient, *blackboard.Store, error) {
	rdb, err := dial(redisURL)
	if err != nil {
		return nil, nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, nil, fmt.Errorf("redis %s: %w (is the adapter running? `make run` serves the embedded blackboard)", redactURL(redisURL), err)
	}
	store, err := blackboard.New(rdb, blackboard.Config{Namespace: board, Clock: clock.Real{}})
	if err != nil {
		_ = rdb.Close()
		return nil, nil, err
	}
	return rdb, store, nil
}

// runInbox talks to a running adapter's HTTP API.
func runInbox(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inbox", flag.ContinueOnError)
	fs.SetOutput(stderr)
	api := fs.String("api", envOr(getenv, "COMPUTEBOARD_API", "http://127.0.0.1:8377"), "the adapter's HTTP address")
	token := fs.String("token", getenv("COMPUTEBOARD_OPERATOR_TOKEN"), "operator token for show, dlq list, drop, requeue and replay (default $COMPUTEBOARD_OPERATOR_TOKEN)")
	module := fs.String("module", "", "list: only this source module")
	prio := fs.Int("priority", -1, "list: only this priority")
	minAge := fs.Duration("min-age", 0, "list: only requests waiting at least this long")
	limit := fs.Int("limit", 100, "list: at most this many")
	all := fs.Bool("all", false, "dlq replay: replay every dead letter")
	rest, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(rest) == 0 {
		return usageError{"inbox: want list, show ID, stats, drop ID, requeue ID, dlq list, dlq replay ID|--all"}
	}
	c := apiClient{base: strings.TrimRight(*api, "/"), token: *token}
	arg := func(i int) (string, error) {
		if len(rest) <= i {
			return "", usageError{fmt.Sprintf("inbox %s: missing argument", strings.Join(rest, " "))}
		}
		return rest[i], nil
	}
	var (
		method, path string
	)
	switch rest[0] {
	case "list":
		q := url.Values{}
		if *module != "" {
			q.Set("module", *module)
		}
		if *prio >= 0 {
			q.Set("priority", fmt.Sprint(*prio))
		}
		if *minAge > 0 {
			q.Set("min_age", minAge.String())
		}
		q.Set("limit", fmt.Sprint(*limit))
		method, path = "GET", "/api/v1/inbox/items?"+q.Encode()
	case "show":
		id, err := arg(1)
		if err != nil {
			return err
		}
		method, path = "GET", "/api/v1/inbox/items/"+url.PathEscape(id)
	case "stats":
		method, path = "GET", "/api/v1/inbox/stats"
	case "drop":
		id, err := arg(1)
		if err != nil {
			return err
		}
		method, path = "DELETE", "/api/v1/inbox/items/"+url.PathEscape(id)
	case "requeue":
		id, err := arg(1)
		if err != nil {
			return err
		}
		method, path = "POST", "/api/v1/inbox/items/"+url.PathEscape(id)+"/requeue"
	case "dlq":
		sub, err := arg(1)
		if err != nil {
			return err
		}
		switch {
		case sub == "list":
			method, path = "GET", "/api/v1/inbox/dlq"
		case sub == "replay" && *all:
			return replayAll(ctx, c, stdout, stderr)
		case sub == "replay":
			id, err := arg(2)
			if err != nil {
				return err
			}
			method, path = "POST", "/api/v1/inbox/dlq/"+url.PathEscape(id)+"/replay"
		default:
			return usageError{"inbox dlq: want list or replay ID|--all"}
		}
	default:
		return usageError{fmt.Sprintf("inbox: unknown subcommand %q", rest[0])}
	}
	return c.do(ctx, method, path, stdout)
}

// replayAll replays every dead letter in batches, saying on stderr how far
// it got, and prints the total as JSON. It looks at as many as there were
// when it began (a request refused again is dead-lettered anew, at the
// end: it is not replayed again).
func replayAll(ctx context.Context, c apiClient, stdout, stderr io.Writer) error {
	var st broker.Stats
	if err := c.getJSON(ctx, "/api/v1/inbox/stats", &st); err != nil {
		return err
	}
	total, after := 0, ""
	for looked := 0; int64(looked) < st.DeadLetters; {
		var b struct {
			Replayed int    `json:"replayed"`
			LookedAt int    `json:"looked_at"`
			Next     string `json:"next"`
			Done     bool   `json:"done"`
		}
		q := url.Values{"count": {strconv.FormatInt(min(200, st.DeadLetters-int64(looked)), 10)}}
		if after != "" {
			q.Set("after", after)
		}
		if err := c.postJSON(ctx, "/api/v1/inbox/dlq/replay?"+q.Encode(), &b); err != nil {
			return fmt.Errorf("after replaying %d: %w", total, err)
		}
		total += b.Replayed
		looked += b.LookedAt
		fmt.Fprintf(stderr, "replayed %d; looked at %d of the %d dead letters there were\n", total, looked, st.DeadLetters)
		if b.Done || b.LookedAt == 0 {
			break
		}
		after = b.Next
	}
	fmt.Fprintf(stdout, "{\"replayed\": %d}\n", total)
	return nil
}

type apiClient struct{ base, token string }

// send makes one call (no body) and returns the answer's status and body.
func (c apiClient) send(ctx context.Context, method, path string) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, nil)
	if err != nil {
		return nil, nil, err
	}
	if c.token != "" { // reads of payloads and dead letters need it too
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: %w (is `adapter serve` running with its HTTP API on?)", method, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	return resp, body, err
}

// getJSON GETs path and decodes its JSON body into v.
func (c apiClient) getJSON(ctx context.Context, path string, v any) error {
	return c.callJSON(ctx, http.MethodGet, path, v)
}

// postJSON POSTs to path (no body) and decodes its JSON answer into v.
func (c apiClient) postJSON(ctx context.Context, path string, v any) error {
	return c.callJSON(ctx, http.MethodPost, path, v)
}

func (c apiClient) callJSON(ctx context.Context, method, path string, v any) error {
	resp, body, err := c.send(ctx, method, path)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	return nil
}

// do makes one call and prints its answer (indented, when JSON).
func (c apiClient) do(ctx context.Context, method, path string, stdout io.Writer) error {
	resp, body, err := c.send(ctx, method, path)
	if err != nil {
		return err
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, body, "", "  ") == nil {
		body = pretty.Bytes()
	}
	fmt.Fprintln(stdout, strings.TrimSpace(string(body)))
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	return nil
}

// runJobs reads job records straight from Redis; `explain` asks the
// running adapter (the engine's latest plan lives there) and falls back to
// the explanation stored on the job record.
func runJobs(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("jobs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	redisURL := fs.String("redis", envOr(getenv, "COMPUTEBOARD_REDIS", "redis://127.0.0.1:6380"), "blackboard Redis URL")
	board := fs.String("board", "default", "blackboard namespace")
	api := fs.String("api", envOr(getenv, "COMPUTEBOARD_API", "http://127.0.0.1:8377"), "the adapter's HTTP address (for explain)")
	rest, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(rest) == 0 {
		return usageError{"jobs: want list, show ID or explain ID"}
	}
	rdb, store, err := openStore(ctx, *redisURL, *board)
	if err != nil {
		return err
	}
	defer rdb.Close()
	js, err := jobs.New(rdb, store, jobs.Config{})
	if err != nil {
		return err
	}
	show := func(v any) error {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, string(b))
		return nil
	}
	switch rest[0] {
	case "list":
		active, err := js.ListActive(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%-32s  %-8s  %-3s  %-16s  %s\n", "JOB", "STATUS", "PRI", "ACCOUNT", "NODE")
		for _, j := range active {
			fmt.Fprintf(stdout, "%-32s  %-8s  %-3d  %-16s  %s\n", j.JobID, j.Status, j.Priority, j.Account, j.Node)
		}
		return nil
	case "show", "explain":
		if len(rest) < 2 {
			return usageError{"jobs " + rest[0] + ": missing job ID"}
		}
		id := rest[1]
		j, err := js.Get(ctx, id)
		if errors.Is(err, jobs.ErrNotFound) {
			// Accept a request entry id too.
			if j2, err2 := js.Get(ctx, wire.JobID(id)); err2 == nil {
				j, err = j2, nil
			}
		}
		if err != nil {
			return err
		}
		if rest[0] == "show" {
			return show(j)
		}
		if j.Status != wire.JobQueued {
			where := ""
			if j.Node != "" {
				where = " on node " + j.Node
				// The node's provider, from the registry (while the node
				// is registered).
				var rec pool.NodeRecord
				if v, err := rdb.HGet(ctx, store.Keys().PoolNodes(), j.Node).Result(); err == nil && json.Unmarshal([]byte(v), &rec) == nil && rec.Provider != "" {
					where += " (provider " + rec.Provider + ")"
				}
			}
			fmt.Fprintf(stdout, "job %s is %s%s, not pending; its last explanation:\n", j.JobID, j.Status, where)
			return show(j.Explanation)
		}
		var live bytes.Buffer
		if err := (apiClient{base: strings.TrimRight(*api, "/")}).do(ctx, "GET", "/api/v1/jobs/"+j.JobID+"/explain", &live); err == nil {
			fmt.Fprint(stdout, live.String())
			return nil
		}
		fmt.Fprintln(stderr, "(adapter API not reachable; showing the explanation stored on the job record)")
		return show(j.Explanation)
	}
	return usageError{fmt.Sprintf("jobs: unknown subcommand %q", rest[0])}
}

// runSim replays a workload trace through the real engine (engine/sim).
func runSim(_ context.Context, args []string, stdout, stderr io.Writer) error {
	return sim.Main(args, stdout, stderr, time.Now)
}

// Package redistest starts a real redis-server for a test package and hands
// each test its own namespace, so tests run in parallel without FlushDB.
//
// Use it from a one-line TestMain:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
//
// and in tests:
//
//	rdb, ns := redistest.New(t)
//
// If redis-server is not installed the package fails with the install
// command; it never skips silently.
package redistest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/computeboard/computeboard/internal/deathsig"
)

// InstallHint is printed when redis-server cannot be found.
const InstallHint = "redis-server not found: install it with `sudo apt-get install -y redis-server` (or run `make test`, which does it for you)"

// shared is the per-package server started by Main. It is set once, before
// any test runs, and only read afterwards.
var shared *Server

// Main starts a redis-server, runs the package's tests and stops the server.
func Main(m *testing.M) {
	srv, err := Start(Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "redistest:", err)
		os.Exit(2)
	}
	shared = srv
	code := m.Run()
	srv.Stop()
	os.Exit(code)
}

// New returns a client of the package's server and a fresh namespace for
// this test. The client is closed when the test ends.
func New(t testing.TB) (redis.UniversalClient, string) {
	t.Helper()
	if shared == nil {
		t.Fatal("redistest: call redistest.Main(m) from TestMain first")
	}
	c := shared.Client(t)
	return c, Namespace(t)
}

// Shared returns the package's server (started by Main).
func Shared(t testing.TB) *Server {
	t.Helper()
	if shared == nil {
		t.Fatal("redistest: call redistest.Main(m) from TestMain first")
	}
	return shared
}

// Namespace returns a fresh random namespace, safe to use as a board name.
func Namespace(t testing.TB) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "t" + hex.EncodeToString(b[:])
}

// Options configure a server.
type Options struct {
	// AOF turns on append-only persistence (appendfsync always, so a
	// SIGKILL loses nothing that was acknowledged). Default off.
	AOF bool
	// TCP listens on a free loopback TCP port as well as the unix socket.
	// Default: unix socket only.
	TCP bool
	// Dir holds the socket, logs and data. Default: a new temp dir.
	Dir string
}

// Server is one redis-server child process.
type Server struct {
	opts Options
	Dir  string
	// Port is the TCP port when Options.TCP is set; it stays the same across
	// Restart so clients can reconnect.
	Port int

	cluster bool // run as a cluster node

	mu  sync.Mutex
	cmd *exec.Cmd // guarded by mu
}

// Start launches redis-server and waits until it answers PING.
func Start(opts Options) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New(InstallHint)
	}
	_ = bin
	dir := opts.Dir
	if dir == "" {
		// Unix socket paths are limited to ~108 bytes: keep it short.
		dir, err = os.MkdirTemp("", "rt")
		if err != nil {
			return nil, err
		}
	}
	s := &Server{opts: opts, Dir: dir}
	if opts.TCP {
		s.Port, err = freePort()
		if err != nil {
			return nil, err
		}
	}
	if err := s.launch(); err != nil {
		return nil, err
	}
	return s, nil
}

// SocketPath is the server's unix socket.
func (s *Server) SocketPath() string { return filepath.Join(s.Dir, "r.sock") }

// URL is a redis:// (TCP) or unix:// URL for the server.
func (s *Server) URL() string {
	if s.opts.TCP {
		return "redis://127.0.0.1:" + strconv.Itoa(s.Port)
	}
	return "unix://" + s.SocketPath()
}

// Options returns go-redis options for the server.
func (s *Server) ClientOptions() *redis.Options {
	if s.opts.TCP {
		return &redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(s.Port), PoolSize: 64}
	}
	return &redis.Options{Network: "unix", Addr: s.SocketPath(), PoolSize: 64}
}

// Client returns a new client, closed when t ends.
func (s *Server) Client(t testing.TB) redis.UniversalClient {
	c := redis.NewClient(s.ClientOptions())
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// ClientAs returns a new client that authenticates as an ACL user of the
// server (created with ACL SETUSER, say by a test through Client), closed
// when t ends. ACL users are per server and tests of a package share one:
// give each test's users unique names (Namespace helps) and delete them
// with DeleteUsers.
func (s *Server) ClientAs(t testing.TB, user, password string) redis.UniversalClient {
	opts := s.ClientOptions()
	opts.Username, opts.Password, opts.PoolSize = user, password, 4
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// DeleteUsers deletes ACL users at the end of t (through the default user).
func (s *Server) DeleteUsers(t testing.TB, users ...string) {
	t.Cleanup(func() {
		c := redis.NewClient(s.ClientOptions())
		defer c.Close()
		args := []any{"ACL", "DELUSER"}
		for _, u := range users {
			args = append(args, u)
		}
		_ = c.Do(context.Background(), args...).Err()
	})
}

func (s *Server) launch() error {
	args := []string{
		"--port", strconv.Itoa(s.Port),
		"--unixsocket", s.SocketPath(), "--unixsocketperm", "700",
		"--save", "", "--dir", s.Dir, "--logfile", filepath.Join(s.Dir, "redis.log"),
		"--daemonize", "no", "--maxclients", "2000",
	}
	if s.opts.TCP {
		args = append(args, "--bind", "127.0.0.1")
	}
	if s.cluster {
		args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(s.Dir, "nodes.conf"),
			"--cluster-node-timeout", "2000", "--repl-diskless-sync-delay", "0")
	}
	if s.opts.AOF {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	cmd := exec.Command("redis-server", args...)
	if err := deathsig.Start(cmd); err != nil {
		return fmt.Errorf("redistest: start redis-server: %w", err)
	}
	s.mu.Lock()
	s.cmd = cmd
	s.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	c := redis.NewClient(s.ClientOptions())
	defer c.Close()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return fmt.Errorf("redistest: redis-server did not answer PING within 10s: %v (log: %s)", err, s.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *Server) logTail() string {
	f, err := os.Open(filepath.Join(s.Dir, "redis.log"))
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var last string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		last = sc.Text()
	}
	return last
}

// Kill stops the server with SIGKILL (a crash), without cleaning up.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

// CopyAOF copies the server's append-only files as they are now (Redis
// 7's appendonlydir, or an older appendonly.aof) to a new directory and
// returns it, for RestartFrom: with appendfsync everysec, a host crash
// leaves the AOF about this far behind what clients were told.
func (s *Server) CopyAOF() (string, error) {
	dst, err := os.MkdirTemp(s.Dir, "aofcopy")
	if err != nil {
		return "", err
	}
	for _, name := range []string{"appendonlydir", "appendonly.aof"} {
		src := filepath.Join(s.Dir, name)
		if _, err := os.Stat(src); err != nil {
			continue
		}
		if out, err := exec.Command("cp", "-a", src, dst+"/").CombinedOutput(); err != nil {
			return "", fmt.Errorf("redistest: copy %s: %v: %s", name, err, out)
		}
	}
	return dst, nil
}

// RestartFrom kills the server (a host crash) and starts it again from
// the append-only files CopyAOF saved in dir: every write acknowledged
// since the copy is lost, as with a lost second of appendfsync everysec.
func (s *Server) RestartFrom(dir string) error {
	s.Kill()
	_ = os.Remove(s.SocketPath())
	for _, name := range []string{"appendonlydir", "appendonly.aof"} {
		_ = os.RemoveAll(filepath.Join(s.Dir, name))
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			continue
		}
		if out, err := exec.Command("cp", "-a", filepath.Join(dir, name), s.Dir+"/").CombinedOutput(); err != nil {
			return fmt.Errorf("redistest: restore %s: %v: %s", name, err, out)
		}
	}
	return s.launch()
}

// Restart kills the server and starts it again on the same socket, port and
// data directory (with AOF the data survives).
func (s *Server) Restart() error {
	s.Kill()
	_ = os.Remove(s.SocketPath())
	return s.launch()
}

// Stop ends the server gracefully and removes its directory unless it was
// given by the caller.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	if s.opts.Dir == "" {
		_ = os.RemoveAll(s.Dir)
	}
}

// StartT starts a dedicated server for one test (for restart and crash
// tests) and stops it when the test ends.
func StartT(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.Dir == "" {
		d, err := os.MkdirTemp("", "rt")
		if err != nil {
			t.Fatal(err)
		}
		opts.Dir = d
		t.Cleanup(func() { _ = os.RemoveAll(d) })
	}
	s, err := Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Cluster is a Redis Cluster of three masters on loopback, for tests that
// check that a board's keys stay in one hash slot.
type Cluster struct {
	Addrs []string
	nodes []*Server
}

// StartCluster starts a three-master cluster for one test and stops it when
// the test ends. It needs redis-cli (shipped with redis-server).
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	c := &Cluster{}
	for range 3 {
		dir, err := os.MkdirTemp("", "rc")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
		port, err := freeClusterPort()
		if err != nil {
			t.Fatal(err)
		}
		s := &Server{opts: Options{TCP: true, Dir: dir}, Dir: dir, Port: port, cluster: true}
		if err := s.launch(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Stop)
		c.nodes = append(c.nodes, s)
		c.Addrs = append(c.Addrs, "127.0.0.1:"+strconv.Itoa(port))
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, a := range c.Addrs {
		for {
			out, _ := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", strings.TrimPrefix(a, "127.0.0.1:"), "cluster", "info").Output()
			if strings.Contains(string(out), "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cluster node %s not ok after 20s:\n%s", a, out)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// Client returns a cluster client, closed when t ends.
func (c *Cluster) Client(t testing.TB) redis.UniversalClient {
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// freeClusterPort finds a free port whose cluster bus port (port+10000) is
// free too.
func freeClusterPort() (int, error) {
	for range 50 {
		p, err := freePort()
		if err != nil {
			return 0, err
		}
		if p+10000 > 65535 {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+10000))
		if err != nil {
			continue
		}
		l.Close()
		return p, nil
	}
	return 0, errors.New("redistest: no free port pair for a cluster node")
}

// RoundTrips counts what a client sends to Redis once CountRoundTrips has
// hooked it: each single command and each pipeline is one round trip.
type RoundTrips struct{ n atomic.Int64 }

// CountRoundTrips hooks a new counter onto rdb and returns it.
func CountRoundTrips(rdb redis.UniversalClient) *RoundTrips {
	rt := &RoundTrips{}
	rdb.AddHook(rt)
	return rt
}

// N is how many round trips were counted so far.
func (rt *RoundTrips) N() int64 { return rt.n.Load() }

// DialHook, ProcessHook and ProcessPipelineHook make it a redis.Hook.
func (rt *RoundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (rt *RoundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { rt.n.Add(1); return next(ctx, cmd) }
}
func (rt *RoundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { rt.n.Add(1); return next(ctx, cmds) }
}

//go:build linux

package supervise

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"
)

// A supervisor server supervises many tasks in one long-lived process: the
// same Start and Supervise as a supervisor per task, the same records in
// each task's directory, and the same guarantee — the server, not the
// adapter, is each task's parent, so a task's outcome is recorded however
// the adapter ends. What it saves is a process per task: a supervisor's
// own exec and Go start-up, which cost several times a trivial task.
//
// The provider starts one per work directory, on demand, as
//
//	<supervisor binary> ServeCommand <work directory>
//
// in a session of its own, and reads "ready" from its stdout once it
// listens. It listens on an abstract unix socket named after the work
// directory and ServerProtocol (ServerSocket), and serves only peers of
// its own user (SO_PEERCRED) or root. One server holds the work
// directory's lock file (ServerLock) at a time; a second one started
// meanwhile waits for it (a server that is going idle) and otherwise
// exits with ExitServerRunning. With no task and no connection for
// ServerIdle it gives up its socket and lock, and exits.
//
// Each connection is one request, a JSON line (ServerRequest):
//
//   - start: the task's directory and Spec, with the task's stdout and
//     stderr files as SCM_RIGHTS. The server answers a Ready line, and,
//     once the task has ended and its exit record is published, the
//     ExitRecord line; then it closes the connection. The provider may
//     write "stop\n" meanwhile: the server reads the task's stop record
//     and stops the task (the per-task supervisor's SIGTERM). The
//     provider going away (EOF) stops nothing.
//   - stop: a task's directory. The server stops that task as above and
//     answers a ServerReply line; for a task started by an adapter that
//     is gone.
//
// Resource limits: as a supervisor per task does, the server sets the
// tasks' limits (Spec.Limits, the provider's, the same for every task) on
// itself, before it starts its first task, and every task inherits them:
// no task runs a moment under other limits, and no CAP_SYS_RESOURCE is
// needed. The server then lives under them too (Limits.OpenFiles bounds
// its descriptors: about four per running task). A task whose spec asks
// for other limits is refused: its provider's configuration changed, and
// the server must go idle and be started again to take the new one.

// ServeCommand is the argument before the work directory on a supervisor
// server's command line (see the top of server.go).
const ServeCommand = "__serve"

// ServerProtocol is the version of the server's requests and replies; it
// is part of the socket's name, so an adapter never talks to a server of
// another protocol.
const ServerProtocol = 1

// ServerIdle is how long a server with no task and no connection waits
// before it exits.
const ServerIdle = 30 * time.Second

// maxSpares bounds the task cgroups a server keeps for reuse (Spares): a
// spare appears when a task ends and goes to the next that starts, so
// they number about the tasks that end together.
const maxSpares = 32

// ExitServerRunning is a server's exit code when another server holds the
// work directory's lock.
const ExitServerRunning = 3

// maxRequest bounds a request line (the spec carries no payload: that is a
// file in the task directory).
const maxRequest = 4 << 20

// ServerSocket is the abstract unix socket name of the supervisor server
// of workDir.
func ServerSocket(workDir string) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d", filepath.Clean(workDir), ServerProtocol))
	return "@computeboard-supervisor-" + hex.EncodeToString(sum[:12])
}

// ServerLock is the lock file a supervisor server of workDir holds.
func ServerLock(workDir string) string {
	return filepath.Join(workDir, fmt.Sprintf(".supervisor-%d.lock", ServerProtocol))
}

// ServerLog is where a supervisor server of workDir logs.
func ServerLog(workDir string) string { return filepath.Join(workDir, ".supervisor.log") }

// ServerRequest is a connection's first line.
type ServerRequest struct {
	Dir  string `json:"dir"`            // the task's directory
	Spec *Spec  `json:"spec,omitempty"` // start: the task; nil: stop the task of Dir
}

// ServerReply answers a stop request.
type ServerReply struct {
	Error string `json:"error,omitempty"`
}

// StopLine is what the provider writes on a start request's connection to
// have the task stopped (its stop record published first).
const StopLine = "stop\n"

// Serve runs a supervisor server and returns the process exit code; args
// is what follows ServeCommand: the work directory, and optionally how
// long to wait idle (default ServerIdle).
func Serve(args []string) int {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	idle := ServerIdle
	if len(args) == 2 {
		if d, err := time.ParseDuration(args[1]); err == nil && d > 0 {
			idle, args = d, args[:1] // else the usage below
		}
	}
	if len(args) != 1 || !filepath.IsAbs(args[0]) {
		fmt.Fprintf(os.Stderr, "usage: %s <work directory> [idle time]; run by the local provider, not by hand\n", ServeCommand)
		return 2
	}
	workDir := args[0]
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).
		With("component", "computeboard-supervisor-server", "pid", os.Getpid())
	lock, err := os.OpenFile(ServerLock(workDir), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		log.Error("lock file", "err", err)
		return 1
	}
	defer lock.Close()
	// A server that is going idle holds the lock until it exits: wait a
	// little for it.
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			fmt.Println("running")
			return ExitServerRunning
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: ServerSocket(workDir), Net: "unix"})
	if err != nil {
		log.Error("listen", "err", err)
		return 1
	}
	s := &server{tasks: map[string]chan error{}, log: log, last: time.Now(), idleFor: idle}
	s.self.PID, s.self.Server = os.Getpid(), true
	_, _, s.self.StartTicks, _ = ProcStat(s.self.PID)
	s.spares = NewSpares(s.self, maxSpares)
	defer func() {
		if err := s.spares.Close(); err != nil {
			log.Warn("spare cgroups not removed; the provider's Prune retries", "err", err)
		}
	}()
	// Ready: and from here on the starter's pipe is not ours to hold.
	fmt.Println("ready")
	if null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0); err == nil {
		_ = syscall.Dup3(int(null.Fd()), 1, 0)
		null.Close()
	}

	go func() { // lives as long as the process
		for sig := range sigs {
			if sig == syscall.SIGHUP {
				continue
			}
			s.stopAll(fmt.Errorf("the supervisor server was sent %v", sig))
			_ = ln.Close()
		}
	}()
	go s.idle(ln)
	var wg sync.WaitGroup
	for {
		conn, err := ln.AcceptUnix()
		if err != nil {
			break // closed: idle, or a signal
		}
		if !s.admit(conn) {
			conn.Close()
			continue
		}
		wg.Go(func() {
			defer s.done()
			s.serve(conn)
		})
	}
	wg.Wait()
	return 0
}

type server struct {
	self    ProcIdentity
	log     *slog.Logger
	idleFor time.Duration
	spares  *Spares // its tasks' cgroups, kept for the next ones

	mu      sync.Mutex
	tasks   map[string]chan error // by task directory: its stop channel
	limits  []Rlimit              // set on itself, for every task to inherit; nil until the first
	conns   int
	last    time.Time // when the last connection ended
	closing bool
}

// admit counts conn, unless the server is closing or conn's peer is
// neither this process's user nor root.
func (s *server) admit(conn *net.UnixConn) bool {
	uid, err := PeerUID(conn)
	if err != nil || (uid != 0 && uid != uint32(os.Geteuid())) {
		s.log.Warn("connection refused", "peer_uid", uid, "err", err)
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.conns++
	return true
}

func (s *server) done() {
	s.mu.Lock()
	s.conns--
	s.last = time.Now()
	s.mu.Unlock()
}

// idle closes ln once the server has had nothing to do for idleFor.
func (s *server) idle(ln *net.UnixListener) {
	t := time.NewTicker(max(10*time.Millisecond, min(time.Second, s.idleFor/2)))
	defer t.Stop()
	for range t.C {
		s.mu.Lock()
		quit := s.conns == 0 && len(s.tasks) == 0 && time.Since(s.last) >= s.idleFor
		if quit {
			s.closing = true
		}
		s.mu.Unlock()
		if quit {
			_ = ln.Close()
			return
		}
	}
}

func (s *server) stopAll(cause error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closing = true
	for _, c := range s.tasks {
		select {
		case c <- cause:
		default:
		}
	}
}

// stop asks the task of dir to stop, with the cause its stop record gives.
func (s *server) stop(dir string) bool {
	cause := errors.New("the supervisor server was asked to stop the task")
	if r, err := ReadStop(dir); err == nil {
		cause = errors.New(r.Cause)
	}
	s.mu.Lock()
	c, ok := s.tasks[dir]
	s.mu.Unlock()
	if ok {
		select {
		case c <- cause:
		default: // one is pending; the first wins
		}
	}
	return ok
}

func (s *server) serve(conn *net.UnixConn) {
	defer conn.Close()
	req, files, rest, err := readRequest(conn)
	defer func() {
		for _, f := range files {
			f.Close() // those not handed to the task's capture
		}
	}()
	if err != nil {
		Send(conn, Ready{Error: "supervisor server: " + err.Error()})
		return
	}
	if req.Spec == nil {
		reply := ServerReply{}
		if !s.stop(req.Dir) {
			reply.Error = "no such task here"
		}
		Send(conn, reply)
		return
	}
	if len(files) != 2 {
		Send(conn, Ready{Error: fmt.Sprintf("supervisor server: %d files sent with the task, want its stdout and stderr", len(files))})
		return
	}
	stdout, stderr := files[0], files[1]
	files = nil // Start hands them to the capture, or closes them
	s.run(conn, rest, req.Dir, req.Spec, stdout, stderr)
}

// run starts and supervises one task, reporting on conn as a supervisor
// per task reports on its status pipe (see Main).
func (s *server) run(conn *net.UnixConn, in *bufio.Reader, dir string, spec *Spec, stdout, stderr *os.File) {
	stop := make(chan error, 1)
	s.mu.Lock()
	_, dup := s.tasks[dir]
	if !dup {
		s.tasks[dir] = stop
	}
	s.mu.Unlock()
	if dup {
		stdout.Close()
		stderr.Close()
		Send(conn, Ready{Error: "supervisor server: this task directory's task is running already"})
		return
	}
	defer func() {
		s.mu.Lock()
		delete(s.tasks, dir)
		s.mu.Unlock()
	}()
	if err := s.ownLimits(spec.Limits); err != nil {
		stdout.Close()
		stderr.Close()
		Send(conn, Ready{Error: "supervisor server: " + err.Error()})
		return
	}
	own := *spec
	own.Limits = nil // set on the server: the task inherits them
	spec = &own
	deadline := time.Now().Add(spec.Timeout)
	cmd, out, warn, err := Start(dir, spec, stdout, stderr, s.self, s.spares, true)
	if err != nil {
		Send(conn, Ready{Error: err.Error()})
		return
	}
	ready := Ready{PID: cmd.Process.Pid}
	if warn != nil {
		ready.StateError = warn.Error()
	}
	Send(conn, ready)
	go func() { // ends when the connection does
		for {
			line, err := in.ReadString('\n')
			if line == StopLine {
				s.stop(dir)
			}
			if err != nil {
				return // the provider is gone: the task goes on
			}
		}
	}()
	log := s.log.With("job", spec.TaskID)
	rec := Supervise(cmd, out, spec, s.spares, deadline, stop, notBefore(spec.StartedAt), log)
	report(dir, rec, conn, func() { _ = conn.CloseWrite() }, log)
}

// ownLimits sets limits on the server, the first time; after that it only
// checks that a task asks for the same.
func (s *server) ownLimits(limits []Rlimit) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.limits != nil {
		if !slices.Equal(s.limits, limits) {
			return errors.New("this work directory's tasks run under other resource limits; the server takes new ones once it has gone idle")
		}
		return nil
	}
	if err := ApplyOwnLimits(limits); err != nil {
		return err
	}
	s.limits = append([]Rlimit{}, limits...)
	return nil
}

// readRequest reads a request line and the files sent with it; rest reads
// what follows on conn.
func readRequest(conn *net.UnixConn) (req ServerRequest, files []*os.File, rest *bufio.Reader, err error) {
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	defer conn.SetReadDeadline(time.Time{})
	// A request is a line of a few KB, up to maxRequest: the first read
	// takes the common case (and the files, which arrive with its first
	// byte), the reader the rest. Larger buffers cost more to clear than
	// the request costs to read, on every start.
	buf := make([]byte, 8<<10)
	oob := make([]byte, syscall.CmsgSpace(2*4))
	n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
	if oobn > 0 {
		if msgs, perr := syscall.ParseSocketControlMessage(oob[:oobn]); perr == nil {
			for _, m := range msgs {
				fds, _ := syscall.ParseUnixRights(&m)
				for _, fd := range fds {
					syscall.CloseOnExec(fd)
					files = append(files, os.NewFile(uintptr(fd), "task output"))
				}
			}
		}
	}
	if err != nil && n == 0 {
		return req, files, nil, err
	}
	rest = bufio.NewReader(io.MultiReader(bytes.NewReader(buf[:n]), conn))
	var line []byte
	for {
		chunk, isPrefix, rerr := rest.ReadLine()
		line = append(line, chunk...)
		if len(line) > maxRequest {
			return req, files, nil, errors.New("request too large")
		}
		if rerr != nil {
			return req, files, nil, fmt.Errorf("reading the request: %w", rerr)
		}
		if !isPrefix {
			break
		}
	}
	if err := json.Unmarshal(line, &req); err != nil {
		return req, files, nil, fmt.Errorf("reading the request: %w", err)
	}
	if !filepath.IsAbs(req.Dir) {
		return req, files, nil, errors.New("the task directory must be an absolute path")
	}
	return req, files, rest, nil
}

// PeerUID is the user of the process at the other end of conn.
func PeerUID(conn *net.UnixConn) (uint32, error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return 0, err
	}
	var (
		cred *syscall.Ucred
		cerr error
	)
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	return cred.Uid, nil
}

// SendRequest writes req on conn as one line, with files (SCM_RIGHTS).
func SendRequest(conn *net.UnixConn, req ServerRequest, files ...*os.File) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = syscall.UnixRights(fds...)
	}
	n, _, err := conn.WriteMsgUnix(b, oob, nil)
	if err != nil {
		return err
	}
	if n < len(b) {
		_, err = conn.Write(b[n:])
	}
	return err
}

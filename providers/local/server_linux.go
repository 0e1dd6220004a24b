package local

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/computeboard/computeboard/providers/local/supervise"
)

// The provider's side of the supervisor server (Config.SupervisorServer;
// the server itself is supervise.Serve, whose doc gives the protocol).

// serverEnv is a supervisor server's environment: one P, as for a
// supervisor per task (supervisorGoEnv), but the runtime's usual garbage
// collection, as it lives on.
var serverEnv = []string{"GOMAXPROCS=1"}

// serverSocket is the socket of cfg's supervisor server, or "" for a
// supervisor per task.
func serverSocket(cfg Config) string {
	if !cfg.SupervisorServer || cfg.SupervisorPath == "" {
		return ""
	}
	return supervise.ServerSocket(cfg.WorkDir)
}

// launchServed has the work directory's supervisor server start tk and
// waits, bounded by ctx, for it to report the task's process started.
func (p *Provider) launchServed(ctx context.Context, tk *task, spec *supervise.Spec, stdout, stderr *os.File) error {
	conn, err := p.dialServer(ctx)
	if err != nil {
		return fmt.Errorf("supervisor server: %w", err)
	}
	fired := make(chan struct{})
	stopWatch := context.AfterFunc(ctx, func() {
		_ = conn.SetDeadline(time.Now())
		close(fired)
	})
	status := bufio.NewReader(conn)
	var ready supervise.Ready
	err = supervise.SendRequest(conn, supervise.ServerRequest{Dir: tk.dir, Spec: spec}, stdout, stderr)
	if err == nil {
		if err = supervise.Receive(status, &ready); errors.Is(err, io.EOF) {
			err = errors.New("the server closed the connection before it started the task")
		}
	}
	if !stopWatch() {
		<-fired
		if err != nil {
			err = fmt.Errorf("%w (%w)", err, context.Cause(ctx))
		}
	}
	_ = conn.SetDeadline(time.Time{})
	if err == nil && ready.Error != "" {
		err = errors.New(ready.Error)
	}
	if err == nil && ready.PID <= 0 {
		err = errors.New("the server reported no process")
	}
	if err != nil {
		p.abandonServed(tk.dir, conn, status)
		return fmt.Errorf("supervisor server: %w", err)
	}
	if ready.StateError != "" {
		p.log.Warn("task started with a problem", "job", tk.id, "err", ready.StateError)
	}
	tk.srv, tk.statusIn, tk.pgid = conn, status, ready.PID
	return nil
}

// abandonServed stops a task whose Start is about to fail, if it got as
// far as starting: a stop request on its connection, then up to the time
// a stop takes for the server to say it has ended.
func (p *Provider) abandonServed(dir string, conn *net.UnixConn, status *bufio.Reader) {
	defer conn.Close()
	_ = supervise.PublishRecord(dir, supervise.FileStop, supervise.StopRecord{Version: supervise.RecordVersion, Cause: "start abandoned", RequestedAt: time.Now()}, false)
	if _, err := conn.Write([]byte(supervise.StopLine)); err != nil {
		return
	}
	_ = conn.SetReadDeadline(time.Now().Add(2*p.grace + time.Second))
	_, _ = io.Copy(io.Discard, status) // until the server closes: the task has ended
}

// waitServed is the waiter's half for a task under the supervisor server:
// it waits for the server to report the outcome on the task's connection.
// A server that dies first leaves the task unobservable: it is handled as
// a supervisor that died (orphaned).
func (p *Provider) waitServed(tk *task) supervise.ExitRecord {
	var rec supervise.ExitRecord
	err := supervise.Receive(tk.statusIn, &rec)
	tk.srv.Close()
	if err == nil && rec.Valid() {
		return rec
	}
	if disk, err := supervise.ReadExit(tk.dir); err == nil {
		return disk // recorded, but not told
	}
	return p.orphaned(tk, fmt.Sprintf("the supervisor server ended without recording the task's outcome (%v)", err))
}

// dialServer connects to the work directory's supervisor server, starting
// one first if none answers.
func (p *Provider) dialServer(ctx context.Context) (*net.UnixConn, error) {
	if c, err := dialServer(p.server); err == nil {
		return c, nil
	}
	p.serverMu.Lock()
	defer p.serverMu.Unlock()
	c, err := dialServer(p.server)
	if err == nil {
		return c, nil // another Start started it meanwhile
	}
	if err := p.startServer(ctx); err != nil {
		return nil, err
	}
	return dialServer(p.server)
}

// dialServer connects to the supervisor server at socket, and checks that
// it runs as this process's user or root: an abstract socket name is
// anyone's to take, and a server of another user must never get a task.
func dialServer(socket string) (*net.UnixConn, error) {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: socket, Net: "unix"})
	if err != nil {
		return nil, err
	}
	uid, err := supervise.PeerUID(c)
	if err == nil && uid != 0 && uid != uint32(os.Geteuid()) {
		err = fmt.Errorf("the process listening on %s runs as uid %d, not as this adapter's user or root: refused", socket, uid)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// startServer starts the work directory's supervisor server and waits,
// bounded by ctx, until it listens (or says another one does). The server
// outlives this process: it is in a session of its own, and only reaped
// here if it exits first.
func (p *Provider) startServer(ctx context.Context) error {
	logf, err := os.OpenFile(supervise.ServerLog(p.workDir), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	out, in, err := os.Pipe()
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(p.supervisor, supervise.ServeCommand, p.workDir)
	cmd.Env = serverEnv
	cmd.Dir = p.workDir
	cmd.Stdout, cmd.Stderr = in, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	in.Close()
	if err != nil {
		return fmt.Errorf("start: %w", err)
	}
	exited := make(chan struct{})
	go func() { // ends when the server exits
		_ = cmd.Wait()
		close(exited)
	}()
	lines := make(chan string, 1)
	go func() { // ends with a line, or at EOF: the server's exit or its line
		line, _ := bufio.NewReader(out).ReadString('\n')
		lines <- strings.TrimSpace(line)
	}()
	select {
	case line := <-lines:
		switch line {
		case "ready", "running": // running: another adapter's server on this work directory
			return nil
		}
		<-exited
		return fmt.Errorf("it exited (%v) before it listened; see %s", cmd.ProcessState, supervise.ServerLog(p.workDir))
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		return fmt.Errorf("not listening yet: %w", context.Cause(ctx))
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		return errors.New("not listening after 10 s; killed")
	}
}

// stopViaServer asks the supervisor server that runs the task of dir to
// stop it (its stop record published first); false if it does not (it is
// gone, or is another server that does not know the task).
func (p *Provider) stopViaServer(ctx context.Context, dir string) bool {
	conn, err := dialServer(p.serverFor(dir))
	if err != nil {
		return false
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	if err := supervise.SendRequest(conn, supervise.ServerRequest{Dir: dir}); err != nil {
		return false
	}
	var reply supervise.ServerReply
	return supervise.Receive(bufio.NewReader(conn), &reply) == nil && reply.Error == ""
}

// serverFor is the socket of the supervisor server of dir's work
// directory.
func (p *Provider) serverFor(dir string) string {
	return supervise.ServerSocket(filepath.Dir(dir))
}

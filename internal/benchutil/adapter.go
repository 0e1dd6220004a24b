package benchutil

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Adapter is one `adapter serve` child process a benchmark drives
// (cmd/e2ebench, cmd/providerbench, cmd/kubebench).
type Adapter struct {
	cmd    *exec.Cmd
	url    string        // its HTTP API
	log    string        // its stderr
	exited chan struct{} // closed once it has exited
	err    error         // how it exited; written before exited is closed
	once   sync.Once
}

// RedisURL is the adapter config's redis URL for a benchmark's -network
// ("tcp" or "unix") and -redis address.
func RedisURL(network, addr string) string {
	if network == "unix" {
		return "unix://" + addr
	}
	return "redis://" + addr
}

// StartAdapter runs `bin serve --config cfgPath --log-level warn`, its
// stderr in logPath, and waits until its HTTP API is up (the config must
// listen on a port: "listen: 127.0.0.1:0") and ready, given the body of
// GET /api/v1/nodes, says it is the scheduler and sees the nodes the
// benchmark needs. On an error nothing is left running.
func StartAdapter(ctx context.Context, bin, cfgPath, logPath string, ready func(nodes string) bool) (*Adapter, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "serve", "--config", cfgPath, "--log-level", "warn")
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	a := &Adapter{cmd: cmd, log: logPath, exited: make(chan struct{})}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if _, rest, ok := strings.Cut(sc.Text(), "HTTP API on "); ok {
				select {
				case urls <- strings.Fields(rest)[0]:
				default:
				}
			}
		}
		a.err = cmd.Wait()
		close(a.exited)
	}()
	if err := a.waitReady(ctx, urls, ready); err != nil {
		a.Stop()
		return nil, err
	}
	return a, nil
}

func (a *Adapter) waitReady(ctx context.Context, urls <-chan string, ready func(string) bool) error {
	select {
	case a.url = <-urls:
	case <-a.exited:
		return a.ExitError()
	case <-ctx.Done():
		return ctx.Err()
	}
	for {
		if body, err := a.Get(ctx, "/api/v1/nodes"); err == nil && ready(body) {
			return nil
		}
		select {
		case <-a.exited:
			return a.ExitError()
		case <-ctx.Done():
			return fmt.Errorf("adapter not ready: %w; log: %s", ctx.Err(), a.LogTail())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Pid is the adapter's process ID.
func (a *Adapter) Pid() int { return a.cmd.Process.Pid }

// Exited is closed once the adapter has exited.
func (a *Adapter) Exited() <-chan struct{} { return a.exited }

// Get GETs path from the adapter's HTTP API; a status other than 200 is
// an error.
func (a *Adapter) Get(ctx context.Context, path string) (string, error) {
	return a.GetWith(ctx, path, "")
}

// GetWith is Get with the operator token (none when "").
func (a *Adapter) GetWith(ctx context.Context, path, token string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", a.url+path, nil)
	if err != nil {
		return "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return string(body), err
}

// Stop ends the adapter: SIGTERM, then SIGKILL after 30 s.
func (a *Adapter) Stop() {
	a.once.Do(func() {
		_ = a.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-a.exited:
		case <-time.After(30 * time.Second):
			_ = a.cmd.Process.Kill()
			<-a.exited
		}
	})
}

// ExitError says that the adapter exited, how, and what it logged last.
func (a *Adapter) ExitError() error {
	return fmt.Errorf("adapter exited (%v); log: %s", a.err, a.LogTail())
}

// LogTail is the end of the adapter's log, for error messages.
func (a *Adapter) LogTail() string {
	b, _ := os.ReadFile(a.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

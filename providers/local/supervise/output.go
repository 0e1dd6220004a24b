package supervise

import (
	"io"
	"os"
	"time"
)

// Capture copies a task's stdout and stderr from pipes into their files,
// each up to a cap; what comes past the cap is read (so the task never
// blocks on a full pipe) and counted, not kept. It runs wherever the task
// is watched: in the supervisor, so the cap holds while no adapter runs,
// or in the provider for a task watched in-process.
//
// A cap on the files themselves (RLIMIT_FSIZE) would cap every file the
// task writes, and kill it with SIGXFSZ at the cap; a pipe caps only the
// two streams and leaves the task alone.
type Capture struct {
	pipes   [2]*os.File // read ends; closed by the copiers, or by stop
	done    [2]chan struct{}
	dropped [2]int64 // written by copier i before done[i] is closed
}

// startCapture makes the pipes and starts a copier goroutine for each
// stream into files[i], at most limit bytes (negative: no cap). The caller
// gives the write ends to the task and closes its own copies once the task
// has started. Each copier ends at EOF (every process holding the write end
// has closed it or exited) or when stop closes its pipe, and closes
// files[i] if own is set.
func startCapture(files [2]*os.File, limit int64, own bool) (c *Capture, writeEnds [2]*os.File, err error) {
	c = &Capture{}
	for i := range 2 {
		r, w, err := os.Pipe()
		if err != nil {
			for j := range i {
				c.pipes[j].Close()
				writeEnds[j].Close()
			}
			if own {
				files[0].Close()
				files[1].Close()
			}
			return nil, [2]*os.File{}, err
		}
		c.pipes[i], writeEnds[i] = r, w
	}
	for i := range 2 {
		c.done[i] = make(chan struct{})
		go func() { // owned by c: ends at EOF or when stop closes the pipe
			defer close(c.done[i])
			c.dropped[i] = copyCapped(files[i], c.pipes[i], limit)
			c.pipes[i].Close()
			if own {
				files[i].Close()
			}
		}()
	}
	return c, writeEnds, nil
}

// copyCapped copies r to w up to limit bytes (negative: all of it), then
// reads and discards the rest, and returns how many bytes it did not keep.
// Bytes that could not be written (a full disk) count as dropped too.
func copyCapped(w io.Writer, r io.Reader, limit int64) (dropped int64) {
	buf := make([]byte, 32<<10)
	var kept int64
	for {
		n, err := r.Read(buf)
		if n > 0 {
			keep := int64(n)
			if limit >= 0 {
				keep = max(min(keep, limit-kept), 0)
			}
			if keep > 0 {
				m, werr := w.Write(buf[:keep])
				kept += int64(m)
				if werr != nil {
					keep = int64(m)
				}
			}
			dropped += int64(n) - keep
		}
		if err != nil {
			return dropped
		}
	}
}

// wait waits for both copiers to reach EOF, which happens once every
// process that holds the pipes has ended; the caller has already cleared
// the task's process group. A process that escaped the group (a new
// session, say) can hold them open for ever, so after grace the pipes are
// closed, and such a process's later output is lost (it gets EPIPE). It
// returns the dropped byte counts of stdout and stderr.
func (c *Capture) wait(grace time.Duration) (stdout, stderr int64) {
	t := time.NewTimer(max(grace, 0))
	defer t.Stop()
	for i := range 2 {
		select {
		case <-c.done[i]:
		case <-t.C:
			c.stop()
			<-c.done[i]
		}
	}
	return c.dropped[0], c.dropped[1]
}

// stop ends the copiers: a Read in progress returns os.ErrClosed.
func (c *Capture) stop() {
	for _, p := range c.pipes {
		_ = p.Close() // a second Close (the copier's own) just fails
	}
}

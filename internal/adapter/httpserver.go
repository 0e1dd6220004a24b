package adapter

import (
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// newHTTPServer is the API server with the hardening of Config.HTTP: read,
// write and idle timeouts, and a header timeout, so that idle or slow
// clients cannot hold connections (and file handles) for ever.
func newHTTPServer(cfg *Config, h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       cfg.HTTP.ReadTimeout.D(),
		WriteTimeout:      cfg.HTTP.WriteTimeout.D(),
		IdleTimeout:       cfg.HTTP.IdleTimeout.D(),
		MaxHeaderBytes:    64 << 10,
	}
}

// limitListener accepts at most n connections at once; Accept waits while
// n are open. With the server's idle timeout, a flood of idle keep-alive
// connections holds at most n file handles, and only for IdleTimeout.
type limitListener struct {
	net.Listener
	sem chan struct{}
}

func newLimitListener(l net.Listener, n int) net.Listener {
	return &limitListener{Listener: l, sem: make(chan struct{}, n)}
}

func (l *limitListener) Accept() (net.Conn, error) {
	l.sem <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// redactURL hides the password of a Redis URL (for banners, logs and
// errors); strings that do not parse are shown only by their scheme.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		if i := strings.Index(s, "://"); i >= 0 {
			return s[:i+3] + "…"
		}
		return "(unparsable URL)"
	}
	return u.Redacted()
}

//go:build !linux

package local

import (
	"context"
	"errors"
	"os"

	"github.com/computeboard/computeboard/providers/local/supervise"
)

// The supervisor server runs on Linux only (see server_linux.go):
// elsewhere Config.SupervisorServer is ignored.

func serverSocket(Config) string { return "" }

var errNoServer = errors.New("the supervisor server runs on Linux only")

func (p *Provider) launchServed(context.Context, *task, *supervise.Spec, *os.File, *os.File) error {
	return errNoServer
}

func (p *Provider) waitServed(tk *task) supervise.ExitRecord {
	return p.orphaned(tk, errNoServer.Error())
}

func (p *Provider) stopViaServer(context.Context, string) bool { return false }

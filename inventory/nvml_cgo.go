//go:build linux && cgo

package inventory

import (
	"fmt"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// realNVML is nvmlEdge over go-nvml. nvml.New only records the library
// path; Init dlopens it, so a binary built here runs where there is no
// driver (Init then returns ERROR_LIBRARY_NOT_FOUND).
type realNVML struct {
	lib  nvml.Interface
	path string
}

// nvmlSession is held from a successful Init to its Shutdown: loading the
// library rewrites go-nvml's package-level function table, so two
// discoveries must not load it at once.
var nvmlSession sync.Mutex

// newNVML returns the edge for the library at path ("" = libnvidia-ml.so.1
// on the loader's search path).
func newNVML(path string) nvmlEdge {
	var opts []nvml.LibraryOption
	if path != "" {
		opts = append(opts, nvml.WithLibraryPath(path))
	}
	if path == "" {
		path = "libnvidia-ml.so.1"
	}
	return realNVML{lib: nvml.New(opts...), path: path}
}

// nvmlErr maps an NVML result to nil, one of the edge's sentinels, or an
// error carrying NVML's own text.
func nvmlErr(r nvml.Return) error {
	switch r {
	case nvml.SUCCESS:
		return nil
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return errNoLibrary
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return errNoDriver
	case nvml.ERROR_NOT_FOUND:
		return errNotFound
	case nvml.ERROR_NOT_SUPPORTED:
		return errNotSupported
	}
	return fmt.Errorf("nvml: %s", nvml.ErrorString(r))
}

func (n realNVML) Init() error {
	nvmlSession.Lock()
	err := nvmlErr(n.lib.Init())
	if err != nil {
		nvmlSession.Unlock()
	}
	if err == errNoLibrary {
		err = fmt.Errorf("%w: %s", errNoLibrary, n.path)
	}
	return err
}

// Shutdown ends the session a successful Init began.
func (n realNVML) Shutdown() error {
	defer nvmlSession.Unlock()
	return nvmlErr(n.lib.Shutdown())
}

func (n realNVML) DeviceCount() (int, error) {
	c, r := n.lib.DeviceGetCount()
	return c, nvmlErr(r)
}

func (n realNVML) Device(i int) (nvmlDevice, error) {
	d, r := n.lib.DeviceGetHandleByIndex(i)
	if err := nvmlErr(r); err != nil {
		return nil, err
	}
	return realDevice{d}, nil
}

type realDevice struct{ d nvml.Device }

func (d realDevice) UUID() (string, error) {
	s, r := d.d.GetUUID()
	return s, nvmlErr(r)
}

func (d realDevice) Name() (string, error) {
	s, r := d.d.GetName()
	return s, nvmlErr(r)
}

func (d realDevice) MemoryMiB() (int64, error) {
	m, r := d.d.GetMemoryInfo()
	return int64(m.Total >> 20), nvmlErr(r)
}

func (d realDevice) MIGMode() (bool, error) {
	cur, _, r := d.d.GetMigMode()
	return cur == nvml.DEVICE_MIG_ENABLE, nvmlErr(r)
}

func (d realDevice) MaxMIGDevices() (int, error) {
	c, r := d.d.GetMaxMigDeviceCount()
	return c, nvmlErr(r)
}

func (d realDevice) MIGDevice(i int) (nvmlDevice, error) {
	m, r := d.d.GetMigDeviceHandleByIndex(i)
	if err := nvmlErr(r); err != nil {
		return nil, err
	}
	return realDevice{m}, nil
}

func (d realDevice) Slices() (gi, ci int, memMiB int64, err error) {
	a, r := d.d.GetAttributes()
	return int(a.GpuInstanceSliceCount), int(a.ComputeInstanceSliceCount), int64(a.MemorySizeMB), nvmlErr(r)
}

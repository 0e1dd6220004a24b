//go:build !(linux && cgo)

package inventory

import "fmt"

// noNVML stands in for NVML in builds without cgo (or off Linux), where
// go-nvml cannot be compiled: such a binary sees no GPUs, and says why.
type noNVML struct{ path string }

func newNVML(path string) nvmlEdge {
	if path == "" {
		path = "libnvidia-ml.so.1"
	}
	return noNVML{path}
}

func (n noNVML) Init() error {
	return fmt.Errorf("%w: %s (this binary was built without cgo)", errNoLibrary, n.path)
}
func (noNVML) Shutdown() error                { return nil }
func (noNVML) DeviceCount() (int, error)      { return 0, nil }
func (noNVML) Device(int) (nvmlDevice, error) { return nil, errNotFound }

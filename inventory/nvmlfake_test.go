package inventory

import "fmt"

// fakeNVML is a hand-written fake of the NVML edge (nvmlEdge): the real
// library cannot run on machines without an NVIDIA driver, so the mapping
// from NVML's answers to GPUs is tested against this. Its fields are the
// answers; a nil error field means success.
type fakeNVML struct {
	initErr   error
	countErr  error
	devices   []*fakeDevice
	initCalls int
	shutdowns int
}

func (f *fakeNVML) Init() error { f.initCalls++; return f.initErr }

func (f *fakeNVML) Shutdown() error { f.shutdowns++; return nil }

func (f *fakeNVML) DeviceCount() (int, error) { return len(f.devices), f.countErr }

func (f *fakeNVML) Device(i int) (nvmlDevice, error) {
	if i < 0 || i >= len(f.devices) {
		return nil, fmt.Errorf("fake nvml: no device %d", i)
	}
	if f.devices[i].handleErr != nil {
		return nil, f.devices[i].handleErr
	}
	return f.devices[i], nil
}

// fakeDevice is one fake GPU or MIG device.
type fakeDevice struct {
	uuid, name string
	memMiB     int64
	migMode    bool
	migErr     error         // MIGMode's error (errNotSupported: no MIG on this GPU)
	migSlots   []*fakeDevice // MIG devices by slot; nil = an empty slot (errNotFound)
	gi, ci     int           // MIG devices: slice counts
	attrErr    error
	handleErr  error // Device(i) fails with this
	nameErr    error
}

func (d *fakeDevice) UUID() (string, error) { return d.uuid, nil }
func (d *fakeDevice) Name() (string, error) { return d.name, d.nameErr }
func (d *fakeDevice) MemoryMiB() (int64, error) {
	return d.memMiB, nil
}
func (d *fakeDevice) MIGMode() (bool, error)      { return d.migMode, d.migErr }
func (d *fakeDevice) MaxMIGDevices() (int, error) { return len(d.migSlots), nil }
func (d *fakeDevice) MIGDevice(i int) (nvmlDevice, error) {
	if d.migSlots[i] == nil {
		return nil, errNotFound
	}
	return d.migSlots[i], nil
}
func (d *fakeDevice) Slices() (gi, ci int, memMiB int64, err error) {
	return d.gi, d.ci, d.memMiB, d.attrErr
}

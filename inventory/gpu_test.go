package inventory

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// logBuffer returns a logger writing text lines to a buffer, and the buffer.
func logBuffer() (*slog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	return slog.New(slog.NewTextHandler(&buf, nil)), &buf
}

func logLines(buf *bytes.Buffer) []string {
	return strings.Split(strings.TrimSpace(buf.String()), "\n")
}

func TestDiscoverGPUsWithoutNVMLIsNoGPUsAndOneLogLine(t *testing.T) {
	for name, initErr := range map[string]error{
		"no library": errNoLibrary,
		"no driver":  errNoDriver,
	} {
		t.Run(name, func(t *testing.T) {
			log, buf := logBuffer()
			lib := &fakeNVML{initErr: initErr, devices: []*fakeDevice{{uuid: "GPU-never-read"}}}
			gpus, err := discoverGPUs(lib, log)
			if err != nil {
				t.Fatalf("discoverGPUs: %v, want no error", err)
			}
			if gpus != nil {
				t.Errorf("gpus = %v, want none", gpus)
			}
			lines := logLines(buf)
			if len(lines) != 1 || !strings.Contains(lines[0], "no GPUs") || !strings.Contains(lines[0], initErr.Error()) {
				t.Errorf("log = %q, want one line saying no GPUs and %q", lines, initErr)
			}
			if lib.shutdowns != 0 {
				t.Errorf("Shutdown called %d times after a failed Init", lib.shutdowns)
			}
		})
	}
}

func TestDiscoverGPUsOtherInitFailureIsAnError(t *testing.T) {
	lib := &fakeNVML{initErr: errors.New("nvml: Insufficient Permissions")}
	_, err := discoverGPUs(lib, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "Insufficient Permissions") {
		t.Fatalf("err = %v, want the init failure", err)
	}
}

func TestDiscoverGPUsMapsDevicesAndMIG(t *testing.T) {
	lib := &fakeNVML{devices: []*fakeDevice{
		// A GPU without MIG support at all.
		{uuid: "GPU-aaa", name: "NVIDIA GeForce RTX 4090", memMiB: 24564, migErr: errNotSupported},
		// MIG-capable, MIG off: handed out whole.
		{uuid: "GPU-bbb", name: "NVIDIA A100-SXM4-80GB", memMiB: 81920},
		// MIG on, with an empty slot between instances; one instance has a
		// name without a profile, so its profile comes from its attributes,
		// and one is a compute instance sharing a GPU instance.
		{uuid: "GPU-ccc", name: "NVIDIA H100 80GB HBM3", memMiB: 81559, migMode: true, migSlots: []*fakeDevice{
			{uuid: "MIG-c0", name: "NVIDIA H100 80GB HBM3 MIG 3g.40gb"},
			nil,
			{uuid: "MIG-c2", name: "NVIDIA H100 80GB HBM3 MIG 1g.10gb+me"},
			{uuid: "MIG-c3", name: "NVIDIA H100 80GB HBM3", gi: 2, ci: 2, memMiB: 19968},
			{uuid: "MIG-c4", name: "unnamed", gi: 2, ci: 1, memMiB: 19968},
		}},
	}}
	log, buf := logBuffer()
	got, err := discoverGPUs(lib, log)
	if err != nil {
		t.Fatal(err)
	}
	want := []GPU{
		{UUID: "GPU-aaa", Name: "NVIDIA GeForce RTX 4090", Model: "GeForce-RTX-4090", MemoryMiB: 24564, Source: FromNVML},
		{UUID: "GPU-bbb", Name: "NVIDIA A100-SXM4-80GB", Model: "A100-SXM4-80GB", MemoryMiB: 81920, Source: FromNVML},
		{UUID: "GPU-ccc", Name: "NVIDIA H100 80GB HBM3", Model: "H100-80GB-HBM3", MemoryMiB: 81559, Source: FromNVML, MIGMode: true,
			MIG: []MIGInstance{{"MIG-c0", "3g.40gb"}, {"MIG-c2", "1g.10gb+me"}, {"MIG-c3", "2g.20gb"}, {"MIG-c4", "1c.2g.20gb"}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GPUs (-want +got):\n%s", diff)
	}
	if lib.shutdowns != 1 {
		t.Errorf("Shutdown called %d times, want 1", lib.shutdowns)
	}
	if !strings.Contains(buf.String(), "count=3") {
		t.Errorf("log = %q, want the discovered count", buf)
	}
}

func TestDiscoverGPUsMIGModeWithoutInstancesIsKeptButUnusable(t *testing.T) {
	lib := &fakeNVML{devices: []*fakeDevice{{uuid: "GPU-m", name: "NVIDIA H200", memMiB: 143771, migMode: true, migSlots: make([]*fakeDevice, 7)}}}
	log, buf := logBuffer()
	got, err := discoverGPUs(lib, log)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Usable() || got[0].Model != "H200" {
		t.Fatalf("got %+v, want one unusable H200", got)
	}
	if !strings.Contains(buf.String(), "level=WARN") || !strings.Contains(buf.String(), "GPU-m") {
		t.Errorf("log = %q, want a warning naming the GPU", buf)
	}
}

func TestDiscoverGPUsFailuresNameTheDevice(t *testing.T) {
	tests := map[string]struct {
		lib      *fakeNVML
		wantText []string
	}{
		"count": {
			lib:      &fakeNVML{countErr: errors.New("nvml: Unknown Error")},
			wantText: []string{"device count", "Unknown Error"},
		},
		"handle": {
			lib:      &fakeNVML{devices: []*fakeDevice{{handleErr: errors.New("nvml: GPU is lost")}}},
			wantText: []string{"device 0", "GPU is lost"},
		},
		"name": {
			lib:      &fakeNVML{devices: []*fakeDevice{{uuid: "GPU-x", nameErr: errors.New("nvml: boom")}}},
			wantText: []string{"device 0", "GPU-x", "name", "boom"},
		},
		"mig mode": {
			lib:      &fakeNVML{devices: []*fakeDevice{{uuid: "GPU-x", migErr: errors.New("nvml: boom")}}},
			wantText: []string{"GPU-x", "mig mode"},
		},
		"mig attributes": {
			lib: &fakeNVML{devices: []*fakeDevice{{uuid: "GPU-x", migMode: true, migSlots: []*fakeDevice{
				{uuid: "MIG-y", name: "no profile here", attrErr: errors.New("nvml: boom")}}}}},
			wantText: []string{"GPU-x", "mig device 0", "MIG-y", "attributes"},
		},
		"mig shape unknown": {
			lib: &fakeNVML{devices: []*fakeDevice{{uuid: "GPU-x", migMode: true, migSlots: []*fakeDevice{
				{uuid: "MIG-y", name: "odd", gi: 9, ci: 9, memMiB: 1024}}}}},
			wantText: []string{"MIG-y", `"9g.1gb"`},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := discoverGPUs(tc.lib, slog.New(slog.DiscardHandler))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.wantText {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if tc.lib.shutdowns != 1 {
				t.Errorf("Shutdown called %d times after a successful Init, want 1", tc.lib.shutdowns)
			}
		})
	}
}

func TestGPUModel(t *testing.T) {
	for name, want := range map[string]string{
		"NVIDIA H100 80GB HBM3": "H100-80GB-HBM3",
		"NVIDIA A100-SXM4-80GB": "A100-SXM4-80GB",
		"NVIDIA H200":           "H200",
		"Tesla T4":              "Tesla-T4",
		"NVIDIA  RTX  A6000 ":   "RTX-A6000",
	} {
		if got := gpuModel(name); got != want {
			t.Errorf("gpuModel(%q) = %q, want %q", name, got, want)
		}
	}
}

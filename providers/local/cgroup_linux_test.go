package local

import (
	"os"
	"slices"
	"testing"
	"time"

	"github.com/computeboard/computeboard/providers"
	"github.com/computeboard/computeboard/providers/local/supervise"
	"github.com/computeboard/computeboard/providers/providertest"
)

// TestCgroupKillFallbacks: the ways of killing a cgroup that the provider
// falls back to where cgroup v2 (cgroup.kill) is not to be had each reach
// a process that left the task's process group and ignores SIGTERM. The
// provider is made to see only some of this machine's hierarchies.
func TestCgroupKillFallbacks(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root, to make cgroups")
	}
	mounts, err := cgroupMounts()
	if err != nil {
		t.Skipf("no cgroup mounts: %v", err)
	}
	tests := map[string]struct {
		keep        func(cgroupMount) bool
		wantKillAll bool
	}{
		"cgroup v1 freezer": {
			keep:        func(m cgroupMount) bool { return !m.v2 },
			wantKillAll: true,
		},
		"cgroup v1 without a freezer: kill each process until none is left": {
			keep: func(m cgroupMount) bool { return !m.v2 && !slices.Contains(m.controllers, supervise.CtlFreezer) },
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			some := slices.DeleteFunc(slices.Clone(mounts), func(m cgroupMount) bool { return !tc.keep(m) })
			p := newTestProvider(t, Config{KillGrace: 200 * time.Millisecond})
			p.cgroups = setupCgroups(Cgroups{Parent: DefaultCgroupParent}, p.name, some)
			if len(p.cgroups.hierarchies) == 0 {
				t.Skipf("no such cgroup hierarchies here: %s", p.cgroups.conf.Missing)
			}
			if p.cgroups.conf.KillAll != tc.wantKillAll {
				if tc.wantKillAll {
					t.Skipf("no v1 freezer here: %s", p.cgroups.conf.Missing)
				}
				t.Errorf("Confinement %+v, want KillAll %v", p.cgroups.conf, tc.wantKillAll)
			}
			h := providertest.Start(t, p, helperTask(t, "family", "stubborn", "setsid"))
			escapee := readPID(t, p, h)
			killLater(t, escapee)
			rec := taskState(t, p, h)
			wantEscaped(t, escapee, rec.PID)
			if err := p.Stop(t.Context(), h); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			if st := poll(t, p, h); st.State != providers.StateCancelled {
				t.Errorf("after Stop: %+v, want cancelled", st)
			}
			if alive(escapee) {
				t.Errorf("process %d, in a session of its own and ignoring SIGTERM, alive after Stop", escapee)
			}
			wantCgroupGone(t, rec)
		})
	}
}

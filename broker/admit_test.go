package broker

import (
	"testing"
	"time"

	"github.com/computeboard/computeboard/wire"
)

func TestAdmission(t *testing.T) {
	type call struct {
		module  string
		waiting int
		after   time.Duration // clock advance before the call
		want    wire.Code     // "" = admitted
	}
	tests := map[string]struct {
		cfg   Config
		calls []call
	}{
		"burst then refill": {
			cfg: Config{ModuleRate: 2, ModuleBurst: 2, ModuleMaxWaiting: -1},
			calls: []call{
				{module: "a"}, {module: "a"}, {module: "a", want: wire.CodeRateLimited},
				{module: "b"}, // buckets are per module
				{module: "a", after: 500 * time.Millisecond},
				{module: "a", want: wire.CodeRateLimited},
			},
		},
		"waiting cap before rate": {
			cfg: Config{ModuleRate: 1, ModuleBurst: 1, ModuleMaxWaiting: 3},
			calls: []call{
				{module: "a", waiting: 3, want: wire.CodeInboxFull},
				{module: "a", waiting: 2}, // the rejected call spent no token
			},
		},
		"unlimited": {
			cfg:   Config{ModuleRate: -1, ModuleMaxWaiting: -1},
			calls: []call{{module: "a", waiting: 1e6}, {module: "a"}, {module: "a"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if err := tc.cfg.fill(); err != nil {
				t.Fatal(err)
			}
			a := newAdmission(tc.cfg)
			now := t0
			for i, c := range tc.calls {
				now = now.Add(c.after)
				var got wire.Code
				if err := a.admit(c.module, c.waiting, now); err != nil {
					got = err.Code
				}
				if got != c.want {
					t.Errorf("call %d (%s): got %q, want %q", i, c.module, got, c.want)
				}
			}
		})
	}
}

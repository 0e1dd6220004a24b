package blackboard

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestModules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newEnv(t, Config{})
	compute := ModuleInfo{Name: "compute", Version: "1.2.0", Capabilities: CapProducer | CapConsumer | CapLearner,
		Description: "compute broker", TopicsProduced: []string{"compute.job", "compute.job", "compute.metrics"}}
	tests := []struct {
		name    string
		m       ModuleInfo
		wantErr error
		want    string // registered event payload
	}{
		{"register", compute, nil, `{"module_name":"compute","capabilities":["CONSUMER","LEARNER","PRODUCER"],"version":"1.2.0"}`},
		{"duplicate", ModuleInfo{Name: "compute"}, ErrConflict, ""},
		{"defaults", ModuleInfo{Name: "reasoning"}, nil, `{"module_name":"reasoning","capabilities":["PRODUCER"],"version":"0.0.0"}`},
		{"empty name", ModuleInfo{}, ErrInvalid, ""},
		{"unknown flag", ModuleInfo{Name: "x", Capabilities: 1 << 9}, ErrInvalid, ""},
	}
	var wantEvents []ev
	for _, tc := range tests {
		err := v.s.RegisterModule(ctx, tc.m)
		if !errors.Is(err, tc.wantErr) {
			t.Errorf("%s: RegisterModule = %v, want %v", tc.name, err, tc.wantErr)
		}
		if tc.want != "" {
			wantEvents = append(wantEvents, ev{EventModuleRegistered, "blackboard", tc.want})
		}
	}
	if diff := cmp.Diff(wantEvents, v.events(t, "blackboard.module.*")); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}

	got, err := v.s.Module(ctx, "compute")
	if err != nil {
		t.Fatal(err)
	}
	wantCompute := compute
	wantCompute.TopicsProduced = []string{"compute.job", "compute.metrics"}
	wantCompute.TopicsConsumed = []string{}
	if diff := cmp.Diff(wantCompute, got); diff != "" {
		t.Errorf("Module (-want +got):\n%s", diff)
	}
	raw, _ := v.rdb.HGet(ctx, v.k.Modules(), "compute").Result()
	wantRaw := `{"name":"compute","version":"1.2.0","capabilities":["CONSUMER","LEARNER","PRODUCER"],` +
		`"description":"compute broker","topics_produced":["compute.job","compute.metrics"],"topics_consumed":[]}`
	if raw != wantRaw {
		t.Errorf("stored ModuleInfo = %s, want %s", raw, wantRaw)
	}
	all, err := v.s.Modules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"compute", "reasoning"}, []string{all[0].Name, all[1].Name}); diff != "" || len(all) != 2 {
		t.Errorf("Modules (-want +got):\n%s", diff)
	}

	if err := v.s.UnregisterModule(ctx, "compute"); err != nil {
		t.Fatal(err)
	}
	if err := v.s.UnregisterModule(ctx, "compute"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second UnregisterModule = %v, want ErrNotFound", err)
	}
	if _, err := v.s.Module(ctx, "compute"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Module after unregister = %v, want ErrNotFound", err)
	}
	last := v.events(t, EventModuleUnregistered)
	if diff := cmp.Diff([]ev{{EventModuleUnregistered, "blackboard", `{"module_name":"compute"}`}}, last); diff != "" {
		t.Errorf("unregistered events (-want +got):\n%s", diff)
	}
}

func TestCapabilityJSON(t *testing.T) {
	tests := map[string]struct {
		c    Capability
		want string
	}{
		"none":  {0, `[]`},
		"one":   {CapValidator, `["VALIDATOR"]`},
		"all":   {CapProducer | CapConsumer | CapTransformer | CapReasoner | CapValidator | CapLearner, `["CONSUMER","LEARNER","PRODUCER","REASONER","TRANSFORMER","VALIDATOR"]`},
		"mixed": {CapTransformer | CapReasoner, `["REASONER","TRANSFORMER"]`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b, err := json.Marshal(tc.c)
			if err != nil || string(b) != tc.want {
				t.Fatalf("Marshal = %s, %v; want %s", b, err, tc.want)
			}
			var back Capability
			if err := json.Unmarshal(b, &back); err != nil || back != tc.c {
				t.Errorf("Unmarshal = %v, %v; want %v", back, err, tc.c)
			}
		})
	}
	var c Capability
	if err := json.Unmarshal([]byte(`["FLYER"]`), &c); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown name = %v, want ErrInvalid", err)
	}
}

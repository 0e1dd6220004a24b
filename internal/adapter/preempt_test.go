package adapter

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/computeboard/computeboard/engine"
	"github.com/computeboard/computeboard/wire"
)

// TestPreemptionConfig: scheduler.preemption becomes the engine's
// PreemptionConfig (0s = none, absent = the engine's default), templates
// carry non_preemptible and preempt_mode to the scheduler, and the
// default is off.
func TestPreemptionConfig(t *testing.T) {
	cfg, err := ParseConfig(nil, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if pc := cfg.Scheduler.Preemption.Engine(); pc.Enabled() {
		t.Errorf("preemption on by default: %+v", pc)
	}
	body := `
scheduler:
  preemption:
    policy: hybrid
    pool_policy: {gpu: "off"}
    min_runtime: 0s
    cooldown: 2m
    budget_per_hour: 10
    account_budget_per_hour: 3
    min_preemptor_level: 8
    max_victims: 2
    max_preemptors: 4
    default_mode: cancel
    hybrid_weights: {priority: 2, cost: 1}
    checkpoint_grace: 5s
    preemptor_wait: 90s
templates:
  batch:
    command: [/bin/sleep]
    preempt_mode: checkpoint
  keep:
    command: [/bin/sleep]
    non_preemptible: true
`
	cfg, err = ParseConfig([]byte(body), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := engine.PreemptionConfig{Policy: engine.PreemptHybrid, PoolPolicy: map[string]engine.PreemptPolicy{"gpu": engine.PreemptOff},
		MinRuntime: -1, Cooldown: 2 * time.Minute, BudgetPerHour: 10, AccountBudgetPerHour: 3, MinPreemptorLevel: 8,
		MaxVictims: 2, MaxPreemptors: 4, DefaultMode: engine.ModeCancel, Weights: engine.HybridWeights{Priority: 2, Cost: 1}}
	if diff := cmp.Diff(want, cfg.Scheduler.Preemption.Engine()); diff != "" {
		t.Errorf("engine config (-want +got)\n%s", diff)
	}
	if g := cfg.Scheduler.Preemption.CheckpointGrace.D(); g != 5*time.Second {
		t.Errorf("checkpoint_grace %v", g)
	}
	p := &poolMember{cfg: cfg}
	for tpl, want := range map[string][2]any{"batch": {false, engine.ModeCheckpoint}, "keep": {true, engine.EvictionMode("")}} {
		spec, werr := p.schedResolve(wire.Request{Template: tpl})
		if werr != nil {
			t.Fatal(werr)
		}
		if spec.NonPreemptible != want[0] || spec.PreemptMode != want[1] {
			t.Errorf("template %s: spec %+v, want non-preemptible %v, mode %v", tpl, spec, want[0], want[1])
		}
	}
}

func TestPreemptionConfigRejects(t *testing.T) {
	tests := map[string]string{
		"unknown policy":      "scheduler:\n  preemption:\n    policy: fifo\n",
		"unknown pool policy": "scheduler:\n  preemption:\n    pool_policy: {a: lifo}\n",
		"negative runtime":    "scheduler:\n  preemption:\n    min_runtime: -1m\n",
		"negative cooldown":   "scheduler:\n  preemption:\n    cooldown: -5s\n",
		"negative grace":      "scheduler:\n  preemption:\n    checkpoint_grace: -5s\n",
		"negative budget":     "scheduler:\n  preemption:\n    budget_per_hour: -1\n",
		"level":               "scheduler:\n  preemption:\n    min_preemptor_level: 10\n",
		"mode":                "scheduler:\n  preemption:\n    default_mode: kill\n",
		"weight":              "scheduler:\n  preemption:\n    hybrid_weights: {cost: -1}\n",
		"template mode":       "templates:\n  x:\n    command: [/bin/echo]\n    preempt_mode: pause\n",
	}
	for name, body := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := ParseConfig([]byte(body), t.TempDir(), nil)
			if err == nil {
				t.Fatalf("config accepted:\n%s", body)
			}
			if !strings.Contains(err.Error(), "preempt") {
				t.Errorf("error %q does not say which setting", err)
			}
		})
	}
}

// TestSimPreemption: `adapter sim TRACE --preemption LIST` compares the
// preemption policies on the trace.
func TestSimPreemption(t *testing.T) {
	var out, errb bytes.Buffer
	trace := "../../engine/sim/testdata/preempt.json"
	if err := runSim(t.Context(), []string{trace, "--preemption", "off,priority,cost-based"}, &out, &errb); err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "EVICTIONS") {
		t.Fatalf("comparison:\n%s", out.String())
	}
	for i, p := range []string{"off", "priority", "cost-based"} {
		if f := strings.Fields(lines[i+1]); len(f) < 2 || f[0] != p || (p == "off") != (f[1] == "0") {
			t.Errorf("row %q: want policy %s, evictions 0 only when off", lines[i+1], p)
		}
	}
	if err := runSim(t.Context(), []string{trace, "--preemption", "fifo"}, &out, &errb); err == nil {
		t.Error("unknown policy accepted")
	}
}

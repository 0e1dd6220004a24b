package blackboard

import "testing"

func TestKeys(t *testing.T) {
	k := NewKeys("b1")
	tests := map[string]struct{ got, want string }{
		"prefix":      {k.Prefix(), "asi:bb:{b1}"},
		"entry":       {k.Entry("abc"), "asi:bb:{b1}:entry:abc"},
		"topics":      {k.Topics(), "asi:bb:{b1}:topics"},
		"topic":       {k.Topic("compute.job"), "asi:bb:{b1}:topic:compute.job"},
		"source":      {k.Source("compute"), "asi:bb:{b1}:source:compute"},
		"prio":        {k.Prio(Critical), "asi:bb:{b1}:prio:3"},
		"all":         {k.All(), "asi:bb:{b1}:all"},
		"expiry":      {k.Expiry(), "asi:bb:{b1}:expiry"},
		"retire":      {k.Retire(), "asi:bb:{b1}:retire"},
		"events":      {k.Events(), "asi:bb:{b1}:events"},
		"modules":     {k.Modules(), "asi:bb:{b1}:modules"},
		"stats":       {k.Stats(), "asi:bb:{b1}:stats"},
		"adapters":    {k.Adapters(), "asi:bb:{b1}:adapters"},
		"jobs owner":  {k.JobsOwner(), "asi:bb:{b1}:jobs:owner"},
		"engine":      {k.EngineState(), "asi:bb:{b1}:engine:state"},
		"inbox":       {k.Inbox(7), "asi:bb:{b1}:inbox:compute:p7"},
		"dlq":         {k.DLQ(), "asi:bb:{b1}:inbox:compute:dlq"},
		"job":         {k.Job("j1"), "asi:bb:{b1}:job:j1"},
		"jobs idem":   {k.JobsIdem(), "asi:bb:{b1}:jobs:idem"},
		"jobs active": {k.JobsActive(), "asi:bb:{b1}:jobs:active"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("got %q, want %q", tc.got, tc.want)
			}
		})
	}
	if got := k.common(); len(got) != 20 || got[19] != k.Retire() {
		t.Errorf("common() = %v, want 20 keys ending in P:retire (post.lua KEYS[1..20])", got)
	}
	if k.owns("asi:bb:{b2}:inbox:compute:p1") || !k.owns(k.Inbox(1)) {
		t.Error("owns() does not tell the board's keys from another board's")
	}
}

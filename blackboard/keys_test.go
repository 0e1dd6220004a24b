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
		"pool lease":  {k.PoolLease(), "asi:bb:{b1}:pool:lease"},
		"pool epoch":  {k.PoolEpoch(), "asi:bb:{b1}:pool:epoch"},
		"node orders": {k.NodeAssign("n1"), "asi:bb:{b1}:pool:assign:n1"},
		"node jobs":   {k.NodeJobs("n1"), "asi:bb:{b1}:pool:node:n1:jobs"},
		"engine":      {k.EngineState(), "asi:bb:{b1}:engine:state"},
		"inbox":       {k.Inbox(7), "asi:bb:{b1}:inbox:compute:p7"},
		"module lane": {k.ModuleInbox("planner", 7), "asi:bb:{b1}:inbox:compute:m:planner:p7"},
		"lane (ok)":   {k.RequestLane("planner", 3), "asi:bb:{b1}:inbox:compute:m:planner:p3"},
		"lane (v1)":   {k.RequestLane("a b", 3), "asi:bb:{b1}:inbox:compute:p3"},
		"lanes":       {k.InboxLanes(), "asi:bb:{b1}:inbox:compute:lanes"},
		"replayed":    {k.Replayed(), "asi:bb:{b1}:inbox:compute:replayed"},
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
	if got := k.common(); len(got) != 11 || got[9] != k.Retire() || got[10] != k.InboxLanes() {
		t.Errorf("common() = %v, want 11 keys ending in P:retire, the lane registry (post.lua KEYS[1..11])", got)
	}
	if k.owns("asi:bb:{b2}:inbox:compute:p1") || !k.owns(k.Inbox(1)) {
		t.Error("owns() does not tell the board's keys from another board's")
	}
}

func TestModuleNamesAndIDs(t *testing.T) {
	hex := "0123456789abcdef0123456789abcdef"
	tests := map[string]struct {
		id         string
		wantValid  bool
		wantModule string
	}{
		"plain":           {hex, true, ""},
		"module":          {"planner:" + hex, true, "planner"},
		"dotted module":   {"a.b-c_D9:" + hex, true, "a.b-c_D9"},
		"glob in module":  {"plan*:" + hex, false, "plan*"},
		"colon in module": {"a:b:" + hex, false, "a:b"},
		"empty module":    {":" + hex, false, ""},
		"long module":     {string(make([]byte, 65)) + ":" + hex, false, string(make([]byte, 65))},
		"short hex":       {"planner:" + hex[1:], false, "planner"},
		"upper hex":       {"planner:" + "0123456789ABCDEF0123456789ABCDEF", false, "planner"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := ValidID(tc.id); got != tc.wantValid {
				t.Errorf("ValidID(%q) = %v, want %v", tc.id, got, tc.wantValid)
			}
			if got := IDModule(tc.id); got != tc.wantModule {
				t.Errorf("IDModule(%q) = %q, want %q", tc.id, got, tc.wantModule)
			}
		})
	}
	members := map[string]struct {
		module string
		lane   int
		ok     bool
	}{
		"planner:p4": {"planner", 4, true},
		"a.b:p0":     {"a.b", 0, true},
		"planner:p":  {"", 0, false},
		"planner:10": {"", 0, false},
		"plan*:p1":   {"plan*", 1, false},
		"p1":         {"", 0, false},
		"x:p12":      {"", 0, false},
	}
	for m, want := range members {
		module, lane, ok := ParseLaneMember(m)
		if ok != want.ok || (ok && (module != want.module || lane != want.lane)) {
			t.Errorf("ParseLaneMember(%q) = %q, %d, %v; want %q, %d, %v", m, module, lane, ok, want.module, want.lane, want.ok)
		}
	}
	if m, l, ok := ParseLaneMember(LaneMember("planner", 9)); !ok || m != "planner" || l != 9 {
		t.Error("LaneMember does not round-trip")
	}
	if id := NewModuleID("planner"); !ValidID(id) || IDModule(id) != "planner" {
		t.Errorf("NewModuleID = %q", id)
	}
}

package broker

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsModuleCardinality: however many modules are held, the
// per-module series are the MetricsTopModules largest plus one "_other"
// series, and their sum is the inbox's.
func TestMetricsModuleCardinality(t *testing.T) {
	bd := newBoard(t)
	b := bd.broker(t, Config{InboxCapacity: 20000, MetricsTopModules: 3})
	total := 0
	for i := range 5000 {
		n := 1
		if i < 3 {
			n = 10 + i // three big modules
		}
		for k := range n {
			id := fmt.Sprintf("%032x", i*100+k)
			if err := b.inbox.Push(Item{ID: id, Module: fmt.Sprintf("mod-%04d", i), Value: &Delivery{EntryID: id}}); err != nil {
				t.Fatal(err)
			}
			total++
		}
	}
	reg := prometheus.NewRegistry()
	if err := b.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	series, sum := 0, 0.0
	for _, mf := range mfs {
		if strings.TrimPrefix(mf.GetName(), metricPrefix) != "inbox_requests_by_module" {
			continue
		}
		for _, m := range mf.GetMetric() {
			series++
			for _, l := range m.GetLabel() {
				if l.GetName() == "module" {
					got[l.GetValue()] = m.GetGauge().GetValue()
				}
			}
			sum += m.GetGauge().GetValue()
		}
	}
	if series != 4 {
		t.Errorf("%d module series, want 4 (top 3 + other)", series)
	}
	want := map[string]float64{"mod-0002": 12, "mod-0001": 11, "mod-0000": 10, OtherModules: 4997}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("module %q = %v, want %v", k, got[k], w)
		}
	}
	if sum != float64(total) {
		t.Errorf("sum %v, want %d", sum, total)
	}
}

package wire

import (
	"encoding/json"
	"math"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestUtilizationEntryFields(t *testing.T) {
	tests := map[string]struct {
		util         map[string]float64
		wantPriority int
		wantData     string
		wantMax      float64
	}{
		"idle":                    {map[string]float64{}, EntryPriorityNormal, `{"max_utilization":0}`, 0},
		"0.8 is still NORMAL":     {map[string]float64{"cpu": 0.8, "memory": 0.1}, EntryPriorityNormal, `{"cpu":0.8,"max_utilization":0.8,"memory":0.1}`, 0.8},
		"above 0.8 is HIGH":       {map[string]float64{"cpu": 0.81}, EntryPriorityHigh, `{"cpu":0.81,"max_utilization":0.81}`, 0.81},
		"0.95 is CRITICAL":        {map[string]float64{"gpu": 0.95, "cpu": 0.2}, EntryPriorityCritical, `{"cpu":0.2,"gpu":0.95,"max_utilization":0.95}`, 0.95},
		"full is CRITICAL":        {map[string]float64{"gpu": 1}, EntryPriorityCritical, `{"gpu":1,"max_utilization":1}`, 1},
		"just below 0.95 is HIGH": {map[string]float64{"gpu": 0.949}, EntryPriorityHigh, `{"gpu":0.949,"max_utilization":0.949}`, 0.949},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := UtilizationEntryFields(tc.util)
			if err != nil {
				t.Fatal(err)
			}
			want := EntryFields{
				Topic:      TopicResourceUtilization,
				Data:       json.RawMessage(tc.wantData),
				Metadata:   map[string]any{"max_utilization": tc.wantMax, "unit": "fraction"},
				Priority:   tc.wantPriority,
				Confidence: 0.9,
				TTLSeconds: 60,
				Tags:       []string{"compute", "resource", "utilization"},
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("UtilizationEntryFields mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestUtilizationEntryFieldsErrors(t *testing.T) {
	tests := map[string]map[string]float64{
		"percentage":   {"cpu": 85},
		"negative":     {"cpu": -0.1},
		"NaN":          {"cpu": math.NaN()},
		"reserved key": {"max_utilization": 0.5},
		"empty key":    {"": 0.5},
	}
	for name, util := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := UtilizationEntryFields(util); err == nil {
				t.Errorf("UtilizationEntryFields(%v) succeeded, want an error", util)
			}
		})
	}
}

func TestExhaustionEdge(t *testing.T) {
	// One utilization series; the event fires on each upward crossing only.
	series := []float64{0.5, 0.96, 0.99, 0.95, 0.94, 0.97, 0.2}
	wantFire := []bool{false, true, false, false, false, true, false}
	var gotFire []bool
	exhausted := false
	for _, u := range series {
		var fire bool
		exhausted, fire = ExhaustionEdge(exhausted, u)
		gotFire = append(gotFire, fire)
	}
	if diff := cmp.Diff(wantFire, gotFire); diff != "" {
		t.Errorf("ExhaustionEdge fires mismatch (-want +got):\n%s", diff)
	}
}

func TestJobStatusEntryFields(t *testing.T) {
	tests := map[string]struct {
		pending      int
		wantPriority int
	}{
		"100 pending is NORMAL": {100, EntryPriorityNormal},
		"101 pending is HIGH":   {101, EntryPriorityHigh},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := JobStatusData{PendingJobs: tc.pending, RunningJobs: 3, CompletedJobs: 7, FailedJobs: 1, InboxDepth: 5,
				Statistics: JobStatistics{JobsSubmitted: 12, JobsCompleted: 7, JobsFailed: 1, AverageWaitTime: 1.5, AverageTurnaroundTime: 30}}
			got, err := JobStatusEntryFields(s)
			if err != nil {
				t.Fatal(err)
			}
			want := EntryFields{
				Topic: TopicJobStatus,
				Data: json.RawMessage(`{"pending_jobs":` + strconv.Itoa(tc.pending) + `,"running_jobs":3,"completed_jobs":7,"failed_jobs":1,"cancelled_jobs":0,"inbox_depth":5,` +
					`"statistics":{"jobs_submitted":12,"jobs_completed":7,"jobs_failed":1,"jobs_cancelled":0,"average_wait_time":1.5,"average_turnaround_time":30}}`),
				Metadata:   map[string]any{"pending": tc.pending, "running": 3, "completed": 7},
				Priority:   tc.wantPriority,
				Confidence: 0.95,
				TTLSeconds: 120,
				Tags:       []string{"compute", "job", "queue", "scheduler"},
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("JobStatusEntryFields mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestJobStatusEntryFieldsErrors(t *testing.T) {
	tests := map[string]JobStatusData{
		"negative pending": {PendingJobs: -1},
		"NaN wait":         {Statistics: JobStatistics{AverageWaitTime: math.NaN()}},
		"infinite wait":    {Statistics: JobStatistics{AverageTurnaroundTime: math.Inf(1)}},
	}
	for name, s := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := JobStatusEntryFields(s); err == nil {
				t.Errorf("JobStatusEntryFields(%+v) succeeded, want an error", s)
			}
		})
	}
}

func TestMetricsEntryFields(t *testing.T) {
	metrics := map[string]float64{"bad": math.NaN()}
	for i := range 25 {
		metrics["m"+strconv.Itoa(100+i)] = float64(i)
	}
	got, err := MetricsEntryFields(metrics)
	if err != nil {
		t.Fatal(err)
	}
	var data map[string]float64
	if err := json.Unmarshal(got.Data, &data); err != nil {
		t.Fatal(err)
	}
	wantData := map[string]float64{"metric_count": 25}
	for i := range MaxMetricsPerEntry {
		wantData["m"+strconv.Itoa(100+i)] = float64(i)
	}
	if diff := cmp.Diff(wantData, data); diff != "" {
		t.Errorf("MetricsEntryFields data mismatch (-want +got):\n%s", diff)
	}
	got.Data = nil
	want := EntryFields{Topic: TopicMetrics, Metadata: map[string]any{}, Priority: EntryPriorityLow, Confidence: 0.85, TTLSeconds: 180, Tags: []string{"compute", "metrics", "monitoring"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("MetricsEntryFields mismatch (-want +got):\n%s", diff)
	}
	if _, err := MetricsEntryFields(map[string]float64{"metric_count": 1}); err == nil {
		t.Error("MetricsEntryFields accepted the reserved name metric_count")
	}
}

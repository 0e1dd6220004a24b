package blackboard

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// queryFixture posts the entries the query tests read. The fake clock
// stands at ts0; "e6" has lapsed.
func queryFixture(t *testing.T) env {
	t.Helper()
	v := newEnv(t, Config{})
	for _, e := range []*Entry{
		mk("compute", withID(hexID(1)), withPrio(Normal), withTS(ts0-100), withSource("compute"), withTags("a"), withConf(0.9)),
		mk("compute.job", withID(hexID(2)), withPrio(High), withTS(ts0-90), withSource("compute"), withTags("a", "b"), withConf(0.5)),
		mk("compute.job.x", withID(hexID(3)), withPrio(Low), withTS(ts0-80), withSource("other"), withTags("b"), withConf(0.3)),
		mk("computer", withID(hexID(4)), withPrio(Critical), withTS(ts0-70), withSource("other")),
		mk("reasoning", withID(hexID(5)), withPrio(Normal), withTS(ts0-60), withSource("r"), withStatus(StatusRetracted)),
		mk("compute.job", withID(hexID(6)), withPrio(High), withTS(ts0-50), withSource("compute"), withTTL(10)),
		mk("compute.job", withID(hexID(7)), withPrio(High), withTS(ts0-40), withSource("compute"), withStatus(StatusConsumed)),
		mk("compute", withID(hexID(8)), withPrio(Normal), withTS(ts0-30), withSource("compute"), withTTL(100)),
	} {
		v.post(t, e)
	}
	return v
}

func TestQuery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := queryFixture(t)
	id := hexID
	tests := map[string]struct {
		q    Query
		want []string
	}{
		"everything, priority then newest":  {Query{}, []string{id(4), id(7), id(2), id(8), id(5), id(1), id(3)}},
		"topic and its subtopics":           {Query{Topics: []string{"compute"}}, []string{id(7), id(2), id(8), id(1), id(3)}},
		"subtopics only":                    {Query{Topics: []string{"compute.*"}}, []string{id(7), id(2), id(3)}},
		"leaf topic":                        {Query{Topics: []string{"compute.job.x"}}, []string{id(3)}},
		"several topics":                    {Query{Topics: []string{"computer", "reasoning"}}, []string{id(4), id(5)}},
		"unknown topic":                     {Query{Topics: []string{"nope"}}, []string{}},
		"sources":                           {Query{SourceModules: []string{"other", "r"}}, []string{id(4), id(5), id(3)}},
		"topic and source":                  {Query{Topics: []string{"compute"}, SourceModules: []string{"other"}}, []string{id(3)}},
		"min confidence":                    {Query{MinConfidence: 0.5}, []string{id(4), id(7), id(2), id(8), id(5), id(1)}},
		"min priority":                      {Query{MinPriority: High}, []string{id(4), id(7), id(2)}},
		"tags any":                          {Query{TagsAny: []string{"b", "zz"}}, []string{id(2), id(3)}},
		"tags all":                          {Query{TagsAll: []string{"a", "b"}}, []string{id(2)}},
		"statuses":                          {Query{Statuses: []Status{StatusConsumed, StatusRetracted}}, []string{id(7), id(5)}},
		"since is inclusive":                {Query{Since: ts0 - 60}, []string{id(7), id(8), id(5)}},
		"limit":                             {Query{Limit: 2}, []string{id(4), id(7)}},
		"limit across levels":               {Query{Topics: []string{"compute"}, Limit: 3}, []string{id(7), id(2), id(8)}},
		"include expired":                   {Query{IncludeExpired: true, MinPriority: High}, []string{id(4), id(7), id(6), id(2)}},
		"lapsed reads as expired":           {Query{IncludeExpired: true, Statuses: []Status{StatusExpired}}, []string{id(6)}},
		"lapsed hidden even when asked for": {Query{Statuses: []Status{StatusExpired}}, []string{}},
	}
	for plan, planName := range map[int]string{planAuto: "auto", planWalk: "walk", planIntersect: "intersect"} {
		v.s.queryPlan = plan
		for name, tc := range tests {
			t.Run(planName+"/"+name, func(t *testing.T) {
				got, err := v.s.Query(ctx, tc.q)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tc.want, ids(got)); diff != "" {
					t.Errorf("Query (-want +got):\n%s", diff)
				}
			})
		}
	}
	// Reads do not write: the lapsed entry is still ACTIVE in Redis.
	if got := v.hash(t, hexID(6))["status"]; got != "active" {
		t.Errorf("query changed status to %q", got)
	}
}

func TestGetByTopicAndSource(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := queryFixture(t)
	id := hexID
	tests := map[string]struct {
		get  func() ([]Entry, error)
		want []string
	}{
		"topic: active, unexpired, newest first": {func() ([]Entry, error) { return v.s.GetByTopic(ctx, "compute") }, []string{id(8), id(3), id(2), id(1)}},
		"leaf topic":                             {func() ([]Entry, error) { return v.s.GetByTopic(ctx, "compute.job") }, []string{id(3), id(2)}},
		"unknown topic":                          {func() ([]Entry, error) { return v.s.GetByTopic(ctx, "x") }, []string{}},
		"source":                                 {func() ([]Entry, error) { return v.s.GetBySource(ctx, "compute") }, []string{id(8), id(2), id(1)}},
		"source without active entries":          {func() ([]Entry, error) { return v.s.GetBySource(ctx, "r") }, []string{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := tc.get()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, ids(got)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	topics, err := v.s.Topics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"compute", "compute.job", "compute.job.x", "computer", "reasoning"}
	if diff := cmp.Diff(want, topics); diff != "" {
		t.Errorf("Topics (-want +got):\n%s", diff)
	}
	if err := v.s.Remove(ctx, hexID(5), ""); err != nil {
		t.Fatal(err)
	}
	topics, _ = v.s.Topics(ctx)
	if diff := cmp.Diff(want[:4], topics); diff != "" {
		t.Errorf("Topics after removing the only reasoning entry (-want +got):\n%s", diff)
	}
}

func TestTopicMatches(t *testing.T) {
	tests := map[string]struct {
		q, topic string
		want     bool
	}{
		"exact":           {"a.b", "a.b", true},
		"child":           {"a.b", "a.b.c", true},
		"sibling prefix":  {"a.b", "a.bc", false},
		"parent":          {"a.b", "a", false},
		"star child":      {"a.*", "a.b", true},
		"star deep child": {"a.*", "a.b.c", true},
		"star not self":   {"a.*", "a", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := topicMatches(tc.q, tc.topic); got != tc.want {
				t.Errorf("topicMatches(%q, %q) = %v, want %v", tc.q, tc.topic, got, tc.want)
			}
		})
	}
}

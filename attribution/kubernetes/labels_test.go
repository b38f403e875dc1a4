package kubernetes

import (
	"slices"
	"strings"
	"testing"
)

func TestSanitizeLabelName(t *testing.T) {
	for in, want := range map[string]string{
		"app":                              "app",
		"app.kubernetes.io/name":           "app_kubernetes_io_name",
		"team":                             "team",
		"costCenter":                       "cost_center",
		"HTTPServer":                       "httpserver",
		"gpu2Type":                         "gpu2_type",
		"ünïcode":                          "_n_code",
		"already_snake":                    "already_snake",
		"example.com/Owner-Team":           "example_com_owner_team",
		"leaderworkerset.sigs.k8s.io/name": "leaderworkerset_sigs_k8s_io_name",
	} {
		if got := SanitizeLabelName(in); got != want {
			t.Errorf("SanitizeLabelName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLabelAllowList(t *testing.T) {
	l, err := NewLabelAllowList("team", "app.kubernetes.io/name", "team", "app_kubernetes_io_name", "app-kubernetes-io-name")
	if err != nil {
		t.Fatal(err)
	}
	wantNames := []string{
		"label_app_kubernetes_io_name_conflict1", // app-kubernetes-io-name
		"label_app_kubernetes_io_name_conflict2", // app.kubernetes.io/name
		"label_app_kubernetes_io_name_conflict3", // app_kubernetes_io_name
		"label_team",
	}
	if got := l.Names(); !slices.Equal(got, wantNames) {
		t.Errorf("Names() = %q, want %q", got, wantNames)
	}
	got := l.Values(map[string]string{"team": "search", "app.kubernetes.io/name": "llm-serve", "other": "x"})
	want := []string{"", "llm-serve", "", "search"}
	if !slices.Equal(got, want) {
		t.Errorf("Values() = %q, want %q", got, want)
	}
	if got := l.Values(nil); !slices.Equal(got, []string{"", "", "", ""}) {
		t.Errorf("Values(nil) = %q", got)
	}
}

func TestLabelAllowListEmpty(t *testing.T) {
	l, err := NewLabelAllowList()
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Names()) != 0 || len(l.Values(map[string]string{"a": "b"})) != 0 {
		t.Errorf("empty allow-list copies labels: %q", l.Names())
	}
	if _, err := NewLabelAllowList("team", " "); err == nil {
		t.Error("a blank key was accepted")
	}
}

// TestLabelAllowListNameTaken: team and Team become label_team_conflict1
// and _conflict2; a third key team_conflict1 is label_team_conflict1 as
// well. Two labels of one name make the whole exposition unparseable
// (found by probing: Prometheus failed every scrape of the node), so the
// allow-list is refused, naming the keys.
func TestLabelAllowListNameTaken(t *testing.T) {
	_, err := NewLabelAllowList("team", "Team", "team_conflict1")
	if err == nil || !strings.Contains(err.Error(), "label_team_conflict1") || !strings.Contains(err.Error(), `"Team"`) || !strings.Contains(err.Error(), `"team_conflict1"`) {
		t.Errorf("error %v, want one naming label_team_conflict1, Team and team_conflict1", err)
	}
}

package collector

import (
	"slices"
	"testing"

	"github.com/xpu-exporter/xpu_exporter/attribution"
	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes"
)

// TestWorkloadInfoPodLabelNames: --kubernetes.pod-label takes Kubernetes
// label keys, and each becomes one "label_<sanitised key>" label, named as
// kube-state-metrics names it in kube_pod_labels, so the two join.
func TestWorkloadInfoPodLabelNames(t *testing.T) {
	for _, tc := range []struct {
		keys   []string
		values []string // the pod's values, in the sorted order of keys
		want   []string // label names on xpu_workload_info after the owner's
	}{
		{keys: []string{"team"}, values: []string{"search"}, want: []string{"label_team"}},
		{
			keys:   []string{"team", "app.kubernetes.io/name", "costCenter"},
			values: []string{"llm", "cc-7", "search"}, // app.kubernetes.io/name, costCenter, team
			want:   []string{"label_app_kubernetes_io_name", "label_cost_center", "label_team"},
		},
		// A key that itself starts with "label_" is a Kubernetes label of
		// that name; kube-state-metrics prefixes it all the same.
		{keys: []string{"label_team"}, values: []string{"x"}, want: []string{"label_label_team"}},
	} {
		allow, err := kubernetes.NewLabelAllowList(tc.keys...)
		if err != nil {
			t.Fatal(err)
		}
		c, err := newAttributionCollector(Config{Attribution: attribution.New(attribution.Config{PodLabels: allow})})
		if err != nil {
			t.Fatal(err)
		}
		l := c.(*attributionCollector).infoLabels(attribution.Owner{
			Kind: attribution.Kubernetes, Namespace: "ml", Pod: "p", Container: "c", PodLabels: tc.values,
		}).flat()
		ownerNames, _ := attribution.Owner{Kind: attribution.Kubernetes, Namespace: "ml", Pod: "p", Container: "c"}.Labels()
		if got := l.names[len(ownerNames):]; !slices.Equal(got, tc.want) {
			t.Errorf("pod labels %q: label names %q, want %q", tc.keys, got, tc.want)
		}
		if got := l.values[len(ownerNames):]; !slices.Equal(got, tc.values) {
			t.Errorf("pod labels %q: values %q, want %q", tc.keys, got, tc.values)
		}
	}
}

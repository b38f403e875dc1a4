package kubernetes

import "testing"

func TestResolveWorkload(t *testing.T) {
	ctrl := func(apiVersion, kind, name string) []Owner {
		return []Owner{{APIVersion: apiVersion, Kind: kind, Name: name, Controller: true}}
	}
	tests := []struct {
		name     string
		pod      string
		labels   map[string]string
		owners   []Owner
		wantName string
		wantKind string
	}{
		{"bare pod", "jupyter-alice", nil, nil, "jupyter-alice", "Pod"},
		{"deployment", "llm-serve-7d9f8b6c5d-x2k4q",
			map[string]string{"pod-template-hash": "7d9f8b6c5d"},
			ctrl("apps/v1", "ReplicaSet", "llm-serve-7d9f8b6c5d"), "llm-serve", "Deployment"},
		{"deployment with dashes in its name", "a-b-c-5f4d-x",
			map[string]string{"pod-template-hash": "5f4d"},
			ctrl("apps/v1", "ReplicaSet", "a-b-c-5f4d"), "a-b-c", "Deployment"},
		{"replicaset whose hash does not match its name", "cache-x2k4q",
			map[string]string{"pod-template-hash": "7d9f8b6c5d"},
			ctrl("apps/v1", "ReplicaSet", "cache"), "cache", "ReplicaSet"},
		{"bare replicaset", "cache-x2k4q", nil,
			ctrl("apps/v1", "ReplicaSet", "cache"), "cache", "ReplicaSet"},
		{"argo rollout", "canary-6c9f8d7b5-q2w3e",
			map[string]string{"rollouts-pod-template-hash": "6c9f8d7b5"},
			ctrl("apps/v1", "ReplicaSet", "canary-6c9f8d7b5"), "canary", "Rollout"},
		{"statefulset", "embeddings-0", nil,
			ctrl("apps/v1", "StatefulSet", "embeddings"), "embeddings", "StatefulSet"},
		{"leaderworkerset worker", "llama-405b-0-1",
			map[string]string{"leaderworkerset.sigs.k8s.io/name": "llama-405b"},
			ctrl("apps/v1", "StatefulSet", "llama-405b-0"), "llama-405b", "LeaderWorkerSet"},
		{"daemonset", "gpu-health-probe-7xk2m", nil,
			ctrl("apps/v1", "DaemonSet", "gpu-health-probe"), "gpu-health-probe", "DaemonSet"},
		{"job", "data-prep-x7k2p", nil,
			ctrl("batch/v1", "Job", "data-prep"), "data-prep", "Job"},
		{"job of a cronjob", "nightly-eval-29480160-5sx8k", nil,
			ctrl("batch/v1", "Job", "nightly-eval-29480160"), "nightly-eval", "CronJob"},
		{"job named with a small number", "train-2-abcde", nil,
			ctrl("batch/v1", "Job", "train-2"), "train-2", "Job"},
		{"job named with a date", "report-20240101-abcde", nil,
			ctrl("batch/v1", "Job", "report-20240101"), "report-20240101", "Job"},
		{"job named just before CronJobs existed", "x-24193439-abcde", nil,
			ctrl("batch/v1", "Job", "x-24193439"), "x-24193439", "Job"},
		{"job of a cronjob scheduled at the earliest accepted minute", "x-24193440-abcde", nil,
			ctrl("batch/v1", "Job", "x-24193440"), "x", "CronJob"},
		{"job named with a 9-digit number", "x-123456789-abcde", nil,
			ctrl("batch/v1", "Job", "x-123456789"), "x-123456789", "Job"},
		{"job of a jobset", "pretrain-workers-0-3-abcde",
			map[string]string{"jobset.sigs.k8s.io/jobset-name": "pretrain"},
			ctrl("batch/v1", "Job", "pretrain-workers-0"), "pretrain", "JobSet"},
		{"custom resource called Job", "vcjob-worker-0", nil,
			ctrl("batch.volcano.sh/v1alpha1", "Job", "vcjob-29480160"), "vcjob-29480160", "Job"},
		{"raycluster", "raycluster-llm-gpu-group-worker-q8n4d", nil,
			ctrl("ray.io/v1", "RayCluster", "raycluster-llm"), "raycluster-llm", "RayCluster"},
		{"pytorchjob", "bert-finetune-worker-0", nil,
			ctrl("kubeflow.org/v1", "PyTorchJob", "bert-finetune"), "bert-finetune", "PyTorchJob"},
		{"controller preferred over other owners", "p",
			nil,
			[]Owner{{APIVersion: "v1", Kind: "ConfigMap", Name: "cm"}, {APIVersion: "ray.io/v1", Kind: "RayJob", Name: "rj", Controller: true}},
			"rj", "RayJob"},
		{"first owner when none is the controller", "p", nil,
			[]Owner{{APIVersion: "example.com/v1", Kind: "Thing", Name: "t"}}, "t", "Thing"},
		{"static pod mirror owned by its node", "kube-proxy-node1", nil,
			ctrl("v1", "Node", "node1"), "node1", "Node"},
		{"owner without a name is ignored", "p", nil,
			[]Owner{{APIVersion: "apps/v1", Kind: "ReplicaSet", Controller: true}}, "p", "Pod"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name, kind := ResolveWorkload(tt.pod, tt.labels, tt.owners)
			if name != tt.wantName || kind != tt.wantKind {
				t.Errorf("ResolveWorkload(%q) = %q, %q; want %q, %q", tt.pod, name, kind, tt.wantName, tt.wantKind)
			}
		})
	}
}

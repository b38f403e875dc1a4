package demo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDRAScenarioPreparesClaims(t *testing.T) {
	s, err := Load("../fixtures/scenarios/dra.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a := started(t, s)
	specs, _ := filepath.Glob(filepath.Join(a.CDISpecDir, "*.yaml"))
	// Three claims (single-gpu-x7k2p, shared-gpu, mig-worker-r4t9z), one
	// spec each; shared-gpu's two consumers share its spec.
	if len(specs) != 3 {
		t.Errorf("%d CDI specs, want 3: %v", len(specs), specs)
	}
	uid := claimUID("ml", "shared-gpu")
	want := "k8s.gpu.nvidia.com/claim=" + uid + "-gpu-2"
	for _, p := range s.Kubernetes.Pods {
		if p.Name != "shared-a" && p.Name != "shared-b" {
			continue
		}
		if got := p.Containers[0].Claims[0].Devices[0].CDIDevices; len(got) != 1 || got[0] != want {
			t.Errorf("%s: CDI devices %v, want [%s]", p.Name, got, want)
		}
	}
	b, err := os.ReadFile(filepath.Join(a.CDISpecDir, "k8s.gpu.nvidia.com-claim_"+claimUID("ml", "mig-worker-r4t9z")+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// GPU instance 9 of GPU 3: 3 + 3*135 + 9*9 = 489; compute instance 0
	// is the next minor, 490.
	for _, node := range []string{"/dev/nvidia3\n", "/dev/nvidia-caps/nvidia-cap489\n", "/dev/nvidia-caps/nvidia-cap490\n"} {
		if !strings.Contains(string(b), node) {
			t.Errorf("MIG claim spec lacks %q:\n%s", node, b)
		}
	}
	if len(uid) != 36 || strings.Count(uid, "-") != 4 {
		t.Errorf("claim UID %q is not UUID-shaped", uid)
	}
}

func TestDRAScenarioRejectsBadClaims(t *testing.T) {
	base := "devices:\n  - {model: X, memory_total: 1GiB, mig: [{profile: 1g.10gb, gpu_instance: 9}, {profile: 1g.10gb, gpu_instance: 10}]}\n" +
		"kubernetes:\n  pods:\n    - {namespace: a, name: p, uid: u, containers: [{name: c, claims: [{namespace: a, name: cl, devices: [{driver: gpu.nvidia.com, pool: n, device: %s}]}]}]}\n"
	for dev, want := range map[string]string{
		"gpu-4":                 `"4" is no NVIDIA GPU's minor number`,
		"tpu-0":                 "want gpu-<minor>",
		"gpu-0-mig-1g10gb-19-0": "2 MIG instances of profile",
	} {
		_, err := Parse([]byte(strings.Replace(base, "%s", dev, 1)))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", dev, err, want)
		}
	}
}

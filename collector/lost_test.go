package collector

import (
	"strings"
	"testing"
	"time"

	"github.com/xpu-exporter/xpu_exporter/demo"
)

// TestLostSinceStartKeepsItsOwner: a GPU that fell off the bus before the
// exporter (re)started answers NVML with GPU_IS_LOST for its UUID too. The
// driver's table names it (the one GPU at an address no read named), so it
// is served down with its UUID and model, and with the pod the kubelet
// allocated it to, as it was before the restart: the lost-GPU alert keeps
// its identity and owner, and the pod's device ID names a device of the
// node (found by probing: probe21-alerts D3, a restart turned the alert
// into "GPU 0 () … (owner: no single owner)").
func TestLostSinceStartKeepsItsOwner(t *testing.T) {
	s, err := demo.Parse([]byte(`node: lost-node
defaults: {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB, metrics: {utilization: 0.5, temperature: 50}}
devices:
  - {uuid: GPU-00000000-0000-4000-8000-000000000000, pci_bus_id: "00000000:18:00.0"}
  - {uuid: GPU-00000000-0000-4000-8000-000000000001, pci_bus_id: "00000000:2A:00.0", faults: {lost: true}}
kubernetes:
  pods:
    - {namespace: ml, name: p0, uid: 00000000-0000-4000-8000-0000000000a1, containers: [{name: c, devices: [{resource: nvidia.com/gpu, ids: [GPU-00000000-0000-4000-8000-000000000001]}]}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	out := scrapeText(t, newAttributedExporterFor(t, s), 10*time.Second)
	const lost = `uuid="GPU-00000000-0000-4000-8000-000000000001"`
	if v := sample(t, out, "xpu_device_up", lost, `pod="p0"`, `model="NVIDIA H100 80GB HBM3"`, `gpu="1"`); v != 0 {
		t.Errorf("the lost GPU's xpu_device_up = %v, want 0", v)
	}
	if !strings.Contains(out, "\nxpu_attribution_unknown_device_ids 0\n") {
		t.Error("xpu_attribution_unknown_device_ids is not 0: the pod's ID names the lost GPU")
	}
	if strings.Contains(out, `xpu_device_up{gpu="1",vendor="nvidia"}`) {
		t.Error("the lost GPU is served by its index alone")
	}
}

package collector

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xpu-exporter/xpu_exporter/attribution"
	"github.com/xpu-exporter/xpu_exporter/attribution/kubernetes"
	"github.com/xpu-exporter/xpu_exporter/attribution/process"
	"github.com/xpu-exporter/xpu_exporter/attribution/slurm"
	"github.com/xpu-exporter/xpu_exporter/demo"
)

// newAttributedExporter runs the default demo scenario with its simulated
// kubelet, procfs and Slurm, through the real attribution code.
func newAttributedExporter(t testing.TB) *Exporter {
	t.Helper()
	return newAttributedExporterFor(t, demo.Default())
}

func newAttributedExporterFor(t testing.TB, s *demo.Scenario, opts ...func(*Config)) *Exporter {
	t.Helper()
	e, _ := newAttributedExporterSim(t, s, opts...)
	return e
}

// newAttributedExporterSim is newAttributedExporterFor that also returns
// the scenario's simulated sources; the amd collector is on when the
// scenario has AMD GPUs, reading them from the simulated sysfs.
func newAttributedExporterSim(t testing.TB, s *demo.Scenario, opts ...func(*Config)) (*Exporter, *demo.Attribution) {
	t.Helper()
	cfg, sim := simulatedAttribution(t, s)
	return newResolvedExporter(t, s, sim, attribution.New(cfg), opts...), sim
}

// newAttributedExporterWith is newAttributedExporterFor with the given
// collectors on (the others off) and a clock of the caller's.
func newAttributedExporterWith(t testing.TB, s *demo.Scenario, collectors map[string]bool, now func() time.Time, opts ...func(*Config)) *Exporter {
	t.Helper()
	cfg, sim := simulatedAttribution(t, s)
	return newExporterWith(t, s, sim, attribution.New(cfg), collectors, now, opts...)
}

// simulatedAttribution starts the scenario's kubelet, procfs and Slurm and
// returns the attribution sources reading them, for a test to alter.
func simulatedAttribution(t testing.TB, s *demo.Scenario) (attribution.Config, *demo.Attribution) {
	t.Helper()
	sim, err := s.StartAttribution()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	cfg := attribution.Config{Procfs: &process.Reader{Root: sim.Procfs, PasswdPath: sim.Passwd}}
	if sim.Exits != nil {
		cfg.Exits = sim.Exits
	}
	if sim.Kubelet != nil {
		client, err := kubernetes.Dial(sim.Kubelet.PodResourcesSocket())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { client.Close() })
		meta, err := kubernetes.StartPodsAPISource(sim.Kubelet.PodsAPISocket(), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { meta.Close() })
		// The Pods API cache fills from a watch: wait for it, bounded, until
		// it has every pod of the scenario (healthy at the first event, it
		// may not have them all: a busy machine's scrape then found some
		// processes' pods unknown).
		known := func() bool {
			if meta.Healthy() != nil {
				return false
			}
			for _, p := range s.Kubernetes.Pods {
				if _, ok := meta.Pod(p.Namespace, p.Name); !ok {
					return false
				}
			}
			return true
		}
		for deadline := time.Now().Add(10 * time.Second); !known() && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		labels, _ := kubernetes.NewLabelAllowList("team")
		cfg.Kubelet, cfg.Metadata, cfg.PodLabels = client, meta, labels
	}
	if sim.CDISpecDir != "" {
		cfg.CDI = &kubernetes.CDISpecs{Dir: sim.CDISpecDir, ProcRoot: sim.Procfs, SysRoot: sim.Sysfs}
	}
	if sim.Scontrol != "" {
		cfg.Slurm, cfg.NodeName = &slurm.Client{Path: sim.Scontrol, SqueuePath: sim.Squeue}, sim.Node
	}
	return cfg, sim
}

// newResolvedExporter serves the scenario's GPUs attributed by resolver,
// with the procfs and sysfs trees of its simulation, at testNow; the Gaudi
// and AMD collectors are on where the scenario has such devices.
func newResolvedExporter(t testing.TB, s *demo.Scenario, sim *demo.Attribution, resolver *attribution.Resolver, opts ...func(*Config)) *Exporter {
	t.Helper()
	return newExporterWith(t, s, sim, resolver, nil, func() time.Time { return testNow }, opts...)
}

// newExporterWith builds the exporter; collectors nil turns on the
// attribution test's usual set.
func newExporterWith(t testing.TB, s *demo.Scenario, sim *demo.Attribution, resolver *attribution.Resolver, collectors map[string]bool, now func() time.Time, opts ...func(*Config)) *Exporter {
	t.Helper()
	ecfg := Config{NVML: s.NVML(testStart, now), Attribution: resolver, Now: now, Procfs: sim.Procfs, Sysfs: sim.Sysfs}
	for _, o := range opts {
		o(&ecfg)
	}
	if collectors == nil {
		collectors = map[string]bool{"nvidia": true, "attribution": true, "process": true, "engines": true,
			"gaudi": ecfg.HLSMIPath != "", "amd": s.HasAMD()}
	}
	return newExporterOf(t, ecfg, enabled(collectors)...)
}

// oracleChecks returns the assertions of the oracle tests on one scrape:
// check that a series has the value worked out by hand (to 1e-9), absent
// that no series of family matches every matcher.
func oracleChecks(out string) (check func(t *testing.T, family string, want float64, matchers ...string), absent func(t *testing.T, family string, matchers ...string)) {
	check = func(t *testing.T, family string, want float64, matchers ...string) {
		t.Helper()
		if got := sample(t, out, family, matchers...); math.Abs(got-want) > 1e-9 {
			t.Errorf("%s%v = %v, want %v", family, matchers, got, want)
		}
	}
	absent = func(t *testing.T, family string, matchers ...string) {
		t.Helper()
		for _, line := range strings.Split(out, "\n") {
			all := strings.HasPrefix(line, family+"{")
			for _, m := range matchers {
				all = all && strings.Contains(line, m)
			}
			if all {
				t.Errorf("want no %s%v, got %s", family, matchers, line)
			}
		}
	}
	return check, absent
}

// sample returns the value of the one series of family whose label set
// contains all of matchers.
func sample(t *testing.T, text, family string, matchers ...string) float64 {
	t.Helper()
	var found []float64
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, family+"{") {
			continue
		}
		ok := true
		for _, m := range matchers {
			ok = ok && strings.Contains(line, m)
		}
		if ok {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				t.Fatal(err)
			}
			found = append(found, v)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s%v: %d series, want 1", family, matchers, len(found))
	}
	return found[0]
}

func TestAttributionOnTheDemoNode(t *testing.T) {
	e := newAttributedExporter(t)
	out := scrapeText(t, e, 10*time.Second)
	gpu2 := `uuid="GPU-2b149611-0000-4000-8000-000000000002"`

	t.Run("time-sliced pods split the device", func(t *testing.T) {
		device := sample(t, out, "xpu_utilization_ratio", gpu2)
		var sum float64
		parts := map[string]float64{}
		for _, who := range []string{`pod="jupyter-alice"`, `pod="jupyter-bob"`, `pod="gpu-health-probe-7xk2m"`, `workload_kind="unattributed"`} {
			parts[who] = sample(t, out, "xpu_workload_utilization_ratio", gpu2, who)
			sum += parts[who]
		}
		if math.Abs(sum-device) > 1e-9 {
			t.Errorf("per-owner utilization sums to %v, the device is at %v", sum, device)
		}
		if !(parts[`pod="jupyter-alice"`] > parts[`pod="jupyter-bob"`] && parts[`pod="jupyter-bob"`] > parts[`pod="gpu-health-probe-7xk2m"`]) {
			t.Errorf("the pods' loads differ (alice > bob > probe) but their parts are %v", parts)
		}
		for _, who := range []string{`pod="jupyter-alice"`, `pod="jupyter-bob"`, `pod="gpu-health-probe-7xk2m"`} {
			if v := sample(t, out, "xpu_workload_allocated_devices", gpu2, who); v != 0.25 {
				t.Errorf("%s holds %v of the GPU, want 1/4 (4 replicas advertised)", who, v)
			}
		}
		// The host daemon's memory is shown apart, not added to a pod.
		if v := sample(t, out, "xpu_workload_memory_used_bytes", gpu2, `workload_kind="unattributed"`); v != 256<<20 {
			t.Errorf("unattributed memory %v, want 256 MiB", v)
		}
	})

	t.Run("shared devices carry no owner labels", func(t *testing.T) {
		for _, family := range []string{"xpu_utilization_ratio", "xpu_memory_used_bytes", "xpu_power_watts"} {
			re := regexp.MustCompile(`(?m)^` + family + `\{[^}]*` + regexp.QuoteMeta(gpu2) + `[^}]*\}`)
			lines := re.FindAllString(out, -1)
			if len(lines) != 1 {
				t.Errorf("%s: %d series for the shared GPU, want 1: %v", family, len(lines), lines)
			}
			if len(lines) == 1 && strings.Contains(lines[0], "pod=") {
				t.Errorf("%s of a shared GPU carries an owner: %s", family, lines[0])
			}
		}
	})

	t.Run("MIG instances carry their own pods", func(t *testing.T) {
		for uuid, pod := range map[string]string{
			"MIG-2b149611-0004-4000-8000-000000000000": "raycluster-llm-gpu-group-worker-q8n4d",
			"MIG-2b149611-0004-4000-8000-000000000001": "nightly-eval-29480160-5sx8k",
			"MIG-2b149611-0004-4000-8000-000000000002": "bert-finetune-worker-0",
		} {
			sample(t, out, "xpu_memory_used_bytes", `uuid="`+uuid+`"`, `pod="`+pod+`"`)
		}
		if v := sample(t, out, "xpu_workload_allocated_devices", `pod="raycluster-llm-gpu-group-worker-q8n4d"`); math.Abs(v-3.0/7) > 1e-9 {
			t.Errorf("a 3g instance is 3/7 of the GPU, got %v", v)
		}
	})

	t.Run("Slurm job, systemd unit, unowned GPU", func(t *testing.T) {
		sample(t, out, "xpu_utilization_ratio", `gpu="5"`, `slurm_job_id="4242"`, `slurm_user="carol"`, `slurm_account="nlp-research"`, `slurm_partition="gpu"`, `slurm_qos="high"`)
		sample(t, out, "xpu_utilization_ratio", `gpu="6"`, `unit="ollama.service"`, `user="ollama"`, `command="ollama"`)
		if v := sample(t, out, "xpu_device_owners", `gpu="7"`); v != 0 {
			t.Errorf("GPU 7 has %v owners, want 0", v)
		}
		line := regexp.MustCompile(`(?m)^xpu_utilization_ratio\{[^}]*gpu="7"[^}]*\}`).FindString(out)
		if regexp.MustCompile(`(namespace|pod|slurm_job_id|unit)=`).MatchString(line) {
			t.Errorf("an unowned GPU has owner labels: %s", line)
		}
	})

	t.Run("per-process series carry the process's own owner", func(t *testing.T) {
		sample(t, out, "xpu_process_memory_used_bytes", `pid="90871"`, `unit="ollama.service"`, `user="ollama"`)
		// On the shared GPU each process names its pod, though the device's
		// own series name none.
		sample(t, out, "xpu_process_utilization_ratio", gpu2, `pid="52011"`, `pod="jupyter-alice"`)
		if line := regexp.MustCompile(`(?m)^xpu_process_memory_used_bytes\{[^}]*pid="1733"[^}]*\}`).FindString(out); strings.Contains(line, "pod=") || line == "" {
			t.Errorf("the host daemon's process series: %q; want one without a pod", line)
		}
	})

	t.Run("workload info and sources", func(t *testing.T) {
		sample(t, out, "xpu_workload_info", `pod="llm-serve-7d9f8b6c5d-x2k4q"`, `workload="llm-serve"`, `workload_kind="Deployment"`, `,label_team="search-ranking"`)
		sample(t, out, "xpu_workload_info", `slurm_job_name="train-llama"`)
		for _, src := range []string{"kubelet", "kubelet-pods-api", "procfs", "slurm"} {
			if v := sample(t, out, "xpu_attribution_source_up", `source="`+src+`"`); v != 1 {
				t.Errorf("source %s down", src)
			}
		}
	})
}

// TestAttributionDRAOtherVendors: claims of AMD's DRA driver (a whole GPU,
// and partition 2 of a QPX MI300X, whose render node is under its
// amdgpu_xcp platform device) and of Intel's Gaudi DRA driver, through the
// CDI specs the demo writes as those drivers do (the AMD "common" device
// listed first, the Gaudi claim's device of hooks after). GPU 0 is card1
// and renderD128; GPU 1 card2 and renderD129, its partitions 1 to 3 the
// node's first platform partitions, cards 3 to 5 and renderD130 to 132, so
// partition 2 is gpu-4-131. A partition is a quarter of its GPU: 1/4.
func TestAttributionDRAOtherVendors(t *testing.T) {
	amd, err := demo.Parse([]byte(`node: dra-amd
defaults: {vendor: amd, model: AMD Instinct MI300X OAM, memory_total: 192GiB, power_limit_watts: 750}
devices:
  - {pci_bus_id: "0000:0c:00.0"}
  - pci_bus_id: "0000:22:00.0"
    partitions: [{}, {}, {}, {}]
kubernetes:
  pods:
    - {namespace: ml, name: whole, uid: 3d000000-0000-4000-8000-0000000000a0, containers: [{name: main, claims: [{namespace: ml, name: c-whole, devices: [{driver: gpu.amd.com, pool: dra-amd, device: gpu-1-128}]}]}]}
    - {namespace: ml, name: part, uid: 3d000000-0000-4000-8000-0000000000a2, containers: [{name: main, claims: [{namespace: ml, name: c-part, devices: [{driver: gpu.amd.com, pool: dra-amd, device: gpu-4-131}]}]}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	e, sim := newAttributedExporterSim(t, amd)
	out := scrapeText(t, e, 10*time.Second)
	// Two claims, and AMD's common device in one spec of its own: defined
	// twice, as in a spec per claim, it would be unusable.
	idx, problems, err := (&kubernetes.CDISpecs{Dir: sim.CDISpecDir, ProcRoot: sim.Procfs, SysRoot: sim.Sysfs}).Load()
	if err != nil || len(problems) != 0 {
		t.Fatal(err, problems)
	}
	if _, err := idx.Lookup("k8s.gpu.amd.com/gpu=common"); err == nil || strings.Contains(err.Error(), "more than one spec") {
		t.Errorf("AMD's common device: %v; want it defined once, naming no device", err)
	}
	check, absent := oracleChecks(out)
	check(t, "xpu_workload_allocated_devices", 1, `gpu="0"`, `pod="whole"`)
	check(t, "xpu_workload_info", 1, `pod="whole"`, `claim="c-whole"`)
	check(t, "xpu_workload_allocated_devices", 0.25, `gpu="1"`, `mig_instance="2"`, `pod="part"`)
	check(t, "xpu_device_owners", 1, `gpu="1"`, `mig_instance="2"`)
	check(t, "xpu_device_owners", 0, `gpu="1"`, `mig_instance="0"`)
	absent(t, "xpu_workload_allocated_devices", `gpu="1"`, `mig_instance="0"`)
	if !strings.Contains(out, "\nxpu_attribution_unresolved_claim_devices 0\n") {
		t.Error("xpu_attribution_unresolved_claim_devices is not 0")
	}

	gaudi, err := demo.Parse([]byte(`node: dra-gaudi
defaults: {vendor: gaudi, model: HL-225, memory_total: 96GiB, power_limit_watts: 600}
devices:
  - {pci_bus_id: "0000:b3:00.0"}
  - {pci_bus_id: "0000:b4:00.0"}
kubernetes:
  pods:
    - {namespace: ml, name: hpu, uid: 3d000000-0000-4000-8000-0000000000b0, containers: [{name: main, claims: [{namespace: ml, name: c-hpu, devices: [{driver: gaudi.intel.com, pool: dra-gaudi, device: 0000-b4-00-0-0x1020}]}]}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	gaudiTable(t, gaudi)
	out = scrapeText(t, newAttributedExporterFor(t, gaudi, func(c *Config) { c.HLSMIPath = selfPath(t) }), 10*time.Second)
	check, absent = oracleChecks(out)
	check(t, "xpu_workload_allocated_devices", 1, `gpu="1"`, `pod="hpu"`)
	check(t, "xpu_workload_info", 1, `pod="hpu"`, `claim="c-hpu"`)
	// Gaudi 0 is in the driver's spec too, as every Gaudi of the node is,
	// and held by nobody.
	absent(t, "xpu_workload_allocated_devices", `gpu="0"`)
	if !strings.Contains(out, "\nxpu_attribution_unresolved_claim_devices 0\n") {
		t.Error("xpu_attribution_unresolved_claim_devices is not 0")
	}

	if _, err := demo.Parse([]byte(`devices: [{vendor: amd, model: AMD Instinct MI300X OAM, memory_total: 192GiB}]
kubernetes: {pods: [{namespace: ml, name: p, containers: [{name: main, claims: [{namespace: ml, name: c, devices: [{driver: gpu.amd.com, pool: n, device: gpu-2-129}]}]}]}]}
`)); err == nil {
		t.Error("a claim of gpu-2-129 on a node of one AMD GPU (card1, renderD128) accepted")
	}
}

// The DRA scenario (fixtures/scenarios/dra.yaml): GPUs by device plugin and
// by DRA claims on one node, through the demo's CDI specs and procfs tables.
func TestAttributionDRAScenario(t *testing.T) {
	s, err := demo.Load("../fixtures/scenarios/dra.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out := scrapeText(t, newAttributedExporterFor(t, s), 10*time.Second)

	// Sole owners label the device series, by device plugin and by claim.
	sample(t, out, "xpu_utilization_ratio", `gpu="0"`, `pod="trainer-0"`, `container="main"`)
	sample(t, out, "xpu_utilization_ratio", `gpu="1"`, `namespace="ml"`, `pod="dra-single"`, `workload="dra-single"`, `workload_kind="Job"`)
	sample(t, out, "xpu_memory_used_bytes", `uuid="MIG-d7a00000-0003-4000-8000-000000000001"`, `pod="mig-worker"`)

	// Claim shared-gpu is used by two pods: each holds 1/2 of GPU 2. The
	// device is at 0.6 and the pods' processes sample 0.4 and 0.2, so
	// shared-a has 0.6 * 0.4/(0.4+0.2) = 0.4 and shared-b 0.6 * 0.2/0.6 = 0.2.
	for pod, want := range map[string][2]float64{"shared-a": {0.5, 0.4}, "shared-b": {0.5, 0.2}} {
		if v := sample(t, out, "xpu_workload_allocated_devices", `gpu="2"`, `pod="`+pod+`"`); v != want[0] {
			t.Errorf("%s holds %v of GPU 2, want %v", pod, v, want[0])
		}
		if v := sample(t, out, "xpu_workload_utilization_ratio", `gpu="2"`, `pod="`+pod+`"`); math.Abs(v-want[1]) > 1e-9 {
			t.Errorf("%s uses %v of GPU 2, want %v", pod, v, want[1])
		}
	}
	if line := regexp.MustCompile(`(?m)^xpu_utilization_ratio\{[^}]*gpu="2"[^}]*\}`).FindString(out); strings.Contains(line, "pod=") {
		t.Errorf("the shared GPU's series carries an owner: %s", line)
	}
	// The 1g.10gb instance is 1/7 of an A100: 1 * 1/7.
	if v := sample(t, out, "xpu_workload_allocated_devices", `pod="mig-worker"`); math.Abs(v-1.0/7) > 1e-9 {
		t.Errorf("mig-worker holds %v, want 1/7", v)
	}

	sample(t, out, "xpu_workload_info", `pod="dra-single"`, `claim="single-gpu-x7k2p"`, `claim_namespace="ml"`)
	sample(t, out, "xpu_workload_info", `pod="shared-b"`, `claim="shared-gpu"`, `claim_namespace="ml"`)
	if line := regexp.MustCompile(`(?m)^xpu_workload_info\{[^}]*pod="trainer-0"[^}]*\}`).FindString(out); strings.Contains(line, "claim") {
		t.Errorf("a device-plugin owner has a claim: %s", line)
	}
	if v := sample(t, out, "xpu_attribution_source_up", `source="cdi"`); v != 1 {
		t.Error("cdi source down")
	}
	if !strings.Contains(out, "\nxpu_attribution_unresolved_claim_devices 0\n") {
		t.Error("xpu_attribution_unresolved_claim_devices is not 0")
	}
}

// TestMIGAllocatedWhole: under the device plugin's MIG strategy none a GPU
// in MIG mode is allocated whole, by UUID (GPU 0) or index (GPU 1), and its
// pod's processes run in the instances (fixtures/scenarios/mig-none.yaml).
func TestMIGAllocatedWhole(t *testing.T) {
	out := scrapeText(t, newAttributedExporterFor(t, loadScenario(t, "mig-none")), 10*time.Second)
	for _, pod := range []string{`pod="whole"`, `pod="whole-idx"`} {
		// The pod holds the whole GPU: 1, counted once, on the GPU itself
		// (its series have no mig_profile), not again per instance.
		if v := sample(t, out, "xpu_workload_allocated_devices", pod); v != 1 {
			t.Errorf("%s allocated %v devices, want 1", pod, v)
		}
		if strings.Contains(out, "\nxpu_workload_allocated_devices{") && regexp.MustCompile(`(?m)^xpu_workload_allocated_devices\{[^}]*mig_profile[^}]*`+regexp.QuoteMeta(pod)).MatchString(out) {
			t.Errorf("%s: an allocation on a MIG instance too", pod)
		}
	}
	// The 3g.40gb instance of GPU 0 runs pid 1001 of pod whole, 8 GiB: the
	// pod's, not unattributed.
	if v := sample(t, out, "xpu_workload_memory_used_bytes", `uuid="MIG-7a000000-0000-4000-8000-000000000001"`, `pod="whole"`); v != 8<<30 {
		t.Errorf("pod whole uses %v bytes of its 3g instance, want 8 GiB = 8589934592", v)
	}
	if v := sample(t, out, "xpu_workload_memory_used_bytes", `uuid="MIG-7a000000-0001-4000-8000-000000000001"`, `pod="whole-idx"`); v != 4<<30 {
		t.Errorf("pod whole-idx uses %v bytes of its 3g instance, want 4 GiB = 4294967296", v)
	}
	if strings.Contains(out, `workload_kind="unattributed"`) {
		t.Error("a pod's process in its GPU's instance is unattributed")
	}
	if v := sample(t, out, "xpu_device_owners", `uuid="MIG-7a000000-0000-4000-8000-000000000001"`); v != 1 {
		t.Errorf("3g instance of GPU 0 has %v owners, want 1", v)
	}
}

// TestProcessOfHostDaemonNamesItsOwn: a host daemon on a time-sliced GPU
// (nv-hostengine of nvidia-dcgm.service, 1 GiB, on GPU 1 of
// fixtures/scenarios/attribution.yaml) is unattributed in the split, but
// its per-process series name its own unit, not nobody (found by probing).
func TestProcessOfHostDaemonNamesItsOwn(t *testing.T) {
	out := scrapeText(t, newAttributedExporterFor(t, loadScenario(t, "attribution")), 10*time.Second)
	if v := sample(t, out, "xpu_process_memory_used_bytes", `pid="1199"`, `unit="nvidia-dcgm.service"`, `command="nv-hostengine"`); v != 1<<30 {
		t.Errorf("nv-hostengine uses %v bytes, want 1 GiB = 1073741824", v)
	}
	if v := sample(t, out, "xpu_workload_memory_used_bytes", `uuid="GPU-e2e00000-0000-4000-8000-000000000001"`, `workload_kind="unattributed"`); v != 1<<30 {
		t.Errorf("GPU 1's unattributed memory %v, want nv-hostengine's 1 GiB", v)
	}
	// A pod's process keeps its pod.
	sample(t, out, "xpu_process_memory_used_bytes", `pid="1100"`, `pod="notebook-a"`)
}

// TestDownDeviceOwnersUnknown: a bare-metal GPU that does not answer (its
// read panics) has had no process list read, so its owners, which come
// from its processes, are unknown: xpu_device_owners is left out, not 0
// like an idle GPU's (found by probing).
func TestDownDeviceOwnersUnknown(t *testing.T) {
	s, err := demo.Parse([]byte(`node: down-node
defaults: {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB, metrics: {utilization: 0.5, temperature: 50}}
devices:
  - {uuid: GPU-d0000000-0000-4000-8000-000000000000, faults: {panic: [temperature]}, processes: [{pid: 2003, unit: p.service, memory_used: 9GiB, utilization: 0.5}]}
  - {uuid: GPU-d0000000-0000-4000-8000-000000000001, processes: [{pid: 2004, unit: q.service, memory_used: 9GiB, utilization: 0.5}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	out := scrapeText(t, newAttributedExporterFor(t, s), 10*time.Second)
	if v := sample(t, out, "xpu_device_up", `uuid="GPU-d0000000-0000-4000-8000-000000000000"`); v != 0 {
		t.Fatalf("the panicking GPU is up (%v): the test proves nothing", v)
	}
	if strings.Contains(out, `xpu_device_owners{gpu="0"`) {
		t.Error("a down GPU whose processes were not read has xpu_device_owners")
	}
	if v := sample(t, out, "xpu_device_owners", `uuid="GPU-d0000000-0000-4000-8000-000000000001"`); v != 1 {
		t.Errorf("the healthy GPU has %v owners, want 1 (q.service)", v)
	}
}

// TestPIDProcfsWillNotShow: a GPU process the driver lists at every scrape
// that procfs will not show (mounted with hidepid=2) is no exit: its GPU's
// owners are unknown, rather than the one process seen owning it whole and
// an idle GPU's 0 where it is alone (probe E PE1). GPU 0 runs a.service's
// 9100 and b.service's 9101, hidden; GPU 1 a.service's 9110 and
// c.service's 9111; GPU 2 only 9120, hidden.
func TestPIDProcfsWillNotShow(t *testing.T) {
	s, err := demo.Parse([]byte(`node: bare
defaults:
  model: NVIDIA H100 80GB HBM3
  memory_total: 80GiB
  metrics: {utilization: 0.5, memory_utilization: 0.25, memory_used: 20GiB, temperature: 50, power: 300}
devices:
  - processes:
      - {pid: 9100, unit: a.service, user: root, command: alpha, memory_used: 3GiB, utilization: 0.3}
      - {pid: 9101, unit: b.service, user: root, command: beta, memory_used: 2GiB, utilization: 0.2}
  - processes:
      - {pid: 9110, unit: a.service, user: root, command: alpha, memory_used: 3GiB, utilization: 0.3}
      - {pid: 9111, unit: c.service, user: root, command: gamma, memory_used: 2GiB, utilization: 0.2}
  - processes:
      - {pid: 9120, unit: d.service, user: root, command: delta, memory_used: 3GiB, utilization: 0.3}
`))
	if err != nil {
		t.Fatal(err)
	}
	e, sim := newAttributedExporterSim(t, s)
	for _, pid := range []string{"9101", "9120"} {
		if err := os.RemoveAll(filepath.Join(sim.Procfs, pid)); err != nil {
			t.Fatal(err)
		}
	}
	// The first read that misses them cannot tell them from processes
	// that exited before procfs was read; the second, with the driver
	// still listing them, can.
	scrapeText(t, e, 10*time.Second)
	out := scrapeText(t, e, 10*time.Second)
	check, absent := oracleChecks(out)
	gpu := func(i int) string { return fmt.Sprintf(`gpu="%d"`, i) }

	// GPU 0: a.service and an owner nobody can tell, so no count, no
	// allocation handed to a.service, and the device's series carry no
	// owner: its 0.5 utilization is the device's alone.
	absent(t, "xpu_device_owners", gpu(0))
	absent(t, "xpu_workload_allocated_devices", gpu(0))
	absent(t, "xpu_utilization_ratio", gpu(0), `unit=`)
	check(t, "xpu_utilization_ratio", 0.5, gpu(0))
	// GPU 2: its only process is hidden: owners unknown, not 0.
	absent(t, "xpu_device_owners", gpu(2))
	// GPU 1 is whole: two units, 1/2 each.
	check(t, "xpu_device_owners", 2, gpu(1))
	check(t, "xpu_workload_allocated_devices", 0.5, gpu(1), `unit="a.service"`)
	check(t, "xpu_workload_allocated_devices", 0.5, gpu(1), `unit="c.service"`)
	check(t, "xpu_attribution_source_up", 0, `source="procfs"`)
}

// TestDeviceIDCase: a device plugin that writes a GPU's UUID in upper case
// names the GPU NVML prints in lower case, hexadecimal either way: its pod
// owns it, 1 owner. A Gaudi serial in another case may be another board's
// (nothing says serials cannot differ only in case): it is counted among
// the unknown IDs, and the board whose serial it matches but for case has
// unknown owners, not 0 while the pod's process runs on it (probe E PE4).
func TestDeviceIDCase(t *testing.T) {
	t.Run("NVIDIA UUID", func(t *testing.T) {
		nv, err := demo.Parse([]byte(`node: k8s-ids
defaults: {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB, metrics: {utilization: 0.5, memory_used: 20GiB, temperature: 50}}
devices:
  - uuid: GPU-abcdef00-0000-4000-8000-000000000000
    processes: [{pid: 3000, pod: ml/upper, memory_used: 8GiB, utilization: 0.4}]
kubernetes:
  pods:
    - {namespace: ml, name: upper, uid: 00000000-0000-4000-8000-0000000000e0, containers: [{name: main, devices: [{resource: nvidia.com/gpu, ids: [GPU-ABCDEF00-0000-4000-8000-000000000000]}]}]}
  allocatable:
    - {resource: nvidia.com/gpu, ids: [GPU-ABCDEF00-0000-4000-8000-000000000000]}
`))
		if err != nil {
			t.Fatal(err)
		}
		out := scrapeText(t, newAttributedExporterFor(t, nv), 10*time.Second)
		if !strings.Contains(out, "\nxpu_attribution_unknown_device_ids 0\n") {
			t.Error("the upper-case UUID is counted as naming no device")
		}
		check, _ := oracleChecks(out)
		check(t, "xpu_device_owners", 1, `gpu="0"`)
		check(t, "xpu_workload_allocated_devices", 1, `gpu="0"`, `pod="upper"`)
	})
	t.Run("Gaudi serial", func(t *testing.T) {
		gaudi, err := demo.Parse([]byte(`node: gaudi1
defaults: {vendor: gaudi, model: HL-225, memory_total: 96GiB, metrics: {utilization: 0.8, memory_used: 64GiB, temperature: 55, power: 420}}
devices:
  - {serial: AN15000001, pci_bus_id: "0000:49:00.0", processes: [{pid: 7000, pod: ml/g-exact, command: python3}]}
  - {serial: AN15000002, pci_bus_id: "0000:4a:00.0", processes: [{pid: 7100, pod: ml/g-lower, command: python3}]}
kubernetes:
  pods:
    - {namespace: ml, name: g-exact, uid: 9a000000-0000-4000-8000-0000000000a0, containers: [{name: main, devices: [{resource: habana.ai/gaudi, ids: [AN15000001]}]}]}
    - {namespace: ml, name: g-lower, uid: 9a000000-0000-4000-8000-0000000000a1, containers: [{name: main, devices: [{resource: habana.ai/gaudi, ids: [an15000002]}]}]}
  allocatable:
    - {resource: habana.ai/gaudi, ids: [AN15000001, an15000002]}
`))
		if err != nil {
			t.Fatal(err)
		}
		gaudiTable(t, gaudi)
		out := scrapeText(t, newAttributedExporterFor(t, gaudi, func(c *Config) { c.HLSMIPath = selfPath(t) }), 10*time.Second)
		if !strings.Contains(out, "\nxpu_attribution_unknown_device_ids 1\n") {
			t.Error("the serial in another case is not counted as naming no device")
		}
		check, absent := oracleChecks(out)
		absent(t, "xpu_device_owners", `gpu="1"`, `vendor="habana"`)
		check(t, "xpu_device_owners", 1, `gpu="0"`, `vendor="habana"`)
		check(t, "xpu_workload_allocated_devices", 1, `gpu="0"`, `pod="g-exact"`)
	})
}

// BenchmarkScrapeAttributed is one scrape of the demo node with attribution:
// NVML reads, kubelet gRPC calls, procfs and the Slurm cache.
func BenchmarkScrapeAttributed(b *testing.B) {
	e := newAttributedExporter(b)
	b.ReportAllocs()
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if snap := e.Snapshot(ctx); snap == nil || len(snap.Devices) == 0 {
			b.Fatal("no snapshot")
		}
		cancel()
	}
}

// sharedScenario is 8 GPUs, each time-sliced between 8 pods, running 1,000
// processes in all.
func sharedScenario(tb testing.TB) *demo.Scenario {
	s, err := demo.Parse([]byte(sharedScenarioYAML()))
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// sharedScenarioYAML is sharedScenario's scenario file.
func sharedScenarioYAML() string {
	var y strings.Builder
	y.WriteString("node: bench-node\ndefaults:\n  model: NVIDIA H100 80GB HBM3\n  memory_total: 80GiB\n  metrics: {utilization: 0.9, memory_utilization: 0.5, memory_used: 70GiB, temperature: 60, power: 500}\ndevices:\n")
	pid := 10000
	for gpu := range 8 {
		y.WriteString("  - processes:\n")
		for p := range 125 {
			fmt.Fprintf(&y, "      - {pid: %d, pod: bench/pod-%d-%d, memory_used: 512MiB, utilization: 0.007}\n", pid, gpu, p%8)
			pid++
		}
	}
	y.WriteString("kubernetes:\n  pods:\n")
	for gpu := range 8 {
		for p := range 8 {
			fmt.Fprintf(&y, "    - {namespace: bench, name: pod-%d-%d, uid: %08d-0000-4000-8000-%012d, containers: [{name: main, devices: [{resource: nvidia.com/gpu, ids: [\"GPU-%08x-0000-4000-8000-%012x::%d\"]}]}]}\n",
				gpu, p, gpu*8+p, gpu*8+p, hashNode("bench-node"), gpu, p)
		}
	}
	// The device plugin advertises the 8 replicas of each GPU, as a
	// time-slicing configuration of 8 does: each pod holds 1/8.
	y.WriteString("  allocatable:\n    - resource: nvidia.com/gpu\n      ids:\n")
	for gpu := range 8 {
		for p := range 8 {
			fmt.Fprintf(&y, "        - \"GPU-%08x-0000-4000-8000-%012x::%d\"\n", hashNode("bench-node"), gpu, p)
		}
	}
	return y.String()
}

// hashNode is how the demo derives GPU UUIDs from the node name.
func hashNode(s string) uint32 {
	var h uint32 = 2166136261
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}

// BenchmarkScrapeShared is one scrape of 8 GPUs shared by 64 pods with
// 1,000 processes: the attribution path at its busiest. The kubelet answers
// from a process of its own (bench_kubelet_test.go).
func BenchmarkScrapeShared(b *testing.B) {
	benchmarkSharedScrape(b, nil)
}

// BenchmarkScrapeSharedDefault is BenchmarkScrapeShared with the default
// collectors: without --collector.process, whose two series per process
// are most of that node's series.
func BenchmarkScrapeSharedDefault(b *testing.B) {
	benchmarkSharedScrape(b, map[string]bool{"nvidia": true, "attribution": true, "engines": true, "cost": true})
}

// benchmarkSharedScrape scrapes sharedScenario's node with the collectors
// (nil: newExporterWith's set), its pods served by a child kubelet and the
// simulated NVML's answers timed apart: own-cpu-ns/op is the exporter's.
func benchmarkSharedScrape(b *testing.B, collectors map[string]bool) {
	y := sharedScenarioYAML()
	s, err := demo.Parse([]byte(y))
	if err != nil {
		b.Fatal(err)
	}
	cfg, sim := simulatedAttribution(b, s)
	k := startChildKubelet(b, y)
	k.attributeFrom(b, &cfg)
	var meter simMeter
	e := newExporterWith(b, s, sim, attribution.New(cfg), collectors, func() time.Time { return testNow },
		func(c *Config) { c.NVML = meter.wrap(c.NVML) })
	benchmarkScrapeOf(b, e, benchApart{kubelet: k, sim: &meter})
}

func TestSharedScenarioAttributesEveryProcess(t *testing.T) {
	e := newAttributedExporterFor(t, sharedScenario(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	snap := e.Snapshot(ctx)
	procs := 0
	for _, d := range snap.Devices {
		if len(d.Claims) != 8 {
			t.Errorf("GPU %s: %d owners, want 8", d.Index, len(d.Claims))
		}
		// One of the 8 replicas advertised: 1/8 = 0.125 each.
		for _, c := range d.Claims {
			if c.Share != 0.125 {
				t.Errorf("GPU %s: %s holds %v, want 1/8", d.Index, c.Owner.Pod, c.Share)
			}
		}
		if d.OwnersUnknown {
			t.Errorf("GPU %s: owners unknown", d.Index)
		}
		for _, i := range d.ProcessOwner {
			if i < 0 {
				t.Errorf("GPU %s: a pod's process is unattributed", d.Index)
			}
			procs++
		}
	}
	if procs != 1000 {
		t.Errorf("%d processes attributed, want 1000", procs)
	}
}

// TestNonUTF8OwnerKeepsDevice: a process may name itself with any bytes
// (prctl PR_SET_NAME). As the GPU's sole owner its command is on every
// series of the GPU; those series are served with each invalid byte
// replaced by U+FFFD, as /devices writes it, not left out (which hid the
// GPU's health, found by probing).
func TestNonUTF8OwnerKeepsDevice(t *testing.T) {
	s, err := demo.Parse([]byte(`node: utf8-node
defaults: {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB, metrics: {utilization: 0.5, temperature: 50}}
devices:
  - {uuid: GPU-d0000000-0000-4000-8000-000000000000, processes: [{pid: 2003, unit: p.service, command: python, memory_used: 9GiB, utilization: 0.5}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	e, sim := newAttributedExporterSim(t, s)
	if err := os.WriteFile(filepath.Join(sim.Procfs, "2003", "comm"), []byte("py\xff\xfethon\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const command = `command="py` + "\uFFFD\uFFFD" + `thon"` // two invalid bytes, two replacements
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var text bytes.Buffer
	e.WriteText(ctx, &text, nil)
	// Through the registry (the OTLP bridge) and the exporter's own text
	// writer (/metrics).
	for path, out := range map[string]string{"registry": scrapeText(t, e, 10*time.Second), "text": text.String()} {
		if v := sample(t, out, "xpu_device_up", command); v != 1 {
			t.Errorf("%s: xpu_device_up = %v, want 1", path, v)
		}
		if v := sample(t, out, "xpu_temperature_celsius", command); v != 50 {
			t.Errorf("%s: xpu_temperature_celsius = %v, want 50", path, v)
		}
	}
}

// TestProcessOfPodNoLongerListed: processes of pods the kubelet no longer
// lists (ended or force-deleted while their processes still run) on
// devices now held by another pod, or by nobody, are unattributed like a
// live pod's stray process: never billed to the device's new owner, never
// dropped from the split (found by probing). The pods' processes run from
// the start; the kubelet stops listing old, gone, old2 and gone2 before the
// scrape. Utilizations are the processes' constant samples, so a device's
// is their sum.
func TestProcessOfPodNoLongerListed(t *testing.T) {
	s, err := demo.Parse([]byte(`node: ended-node
defaults: {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB, metrics: {memory_used: 10GiB, temperature: 50}}
devices:
  - uuid: GPU-0e000000-0000-4000-8000-000000000000
    processes: [{pid: 9001, pod: ml/old, memory_used: 4GiB, utilization: 0.4}]
  - uuid: GPU-0e000000-0000-4000-8000-000000000001
    processes:
      - {pid: 9101, pod: ml/tsa, memory_used: 1GiB, utilization: 0.2}
      - {pid: 9102, pod: ml/gone, memory_used: 2GiB, utilization: 0.3}
  - uuid: GPU-0e000000-0000-4000-8000-000000000002
    mig:
      - {uuid: MIG-0e000000-0002-4000-8000-000000000001, profile: 3g.40gb, gpu_instance: 1, memory_used: 5GiB, metrics: {graphics_active: 0.5},
         processes: [{pid: 9201, pod: ml/old2, memory_used: 4GiB}]}
  - uuid: GPU-0e000000-0000-4000-8000-000000000003
    processes: [{pid: 9301, pod: ml/gone2, memory_used: 2GiB, utilization: 0.3}]
kubernetes:
  pods:
    - {namespace: ml, name: old,    uid: 0e000000-0000-4000-8000-0000000000a0, containers: [{name: c}]}
    - {namespace: ml, name: gone,   uid: 0e000000-0000-4000-8000-0000000000a2, containers: [{name: c}]}
    - {namespace: ml, name: old2,   uid: 0e000000-0000-4000-8000-0000000000a3, containers: [{name: c}]}
    - {namespace: ml, name: gone2,  uid: 0e000000-0000-4000-8000-0000000000a4, containers: [{name: c}]}
    - {namespace: ml, name: fresh,  uid: 0e000000-0000-4000-8000-0000000000b0, containers: [{name: c, devices: [{resource: nvidia.com/gpu, ids: [GPU-0e000000-0000-4000-8000-000000000000]}]}]}
    - {namespace: ml, name: tsa,    uid: 0e000000-0000-4000-8000-0000000000a1, containers: [{name: c, devices: [{resource: nvidia.com/gpu, ids: ["GPU-0e000000-0000-4000-8000-000000000001::0"]}]}]}
    - {namespace: ml, name: fresh2, uid: 0e000000-0000-4000-8000-0000000000b1, containers: [{name: c, devices: [{resource: nvidia.com/gpu, ids: ["GPU-0e000000-0000-4000-8000-000000000001::1"]}]}]}
    - {namespace: ml, name: fresh3, uid: 0e000000-0000-4000-8000-0000000000b2, containers: [{name: c, devices: [{resource: nvidia.com/mig-3g.40gb, ids: [MIG-0e000000-0002-4000-8000-000000000001]}]}]}
  allocatable:
    - {resource: nvidia.com/gpu, ids: [GPU-0e000000-0000-4000-8000-000000000000, "GPU-0e000000-0000-4000-8000-000000000001::0", "GPU-0e000000-0000-4000-8000-000000000001::1", GPU-0e000000-0000-4000-8000-000000000003]}
    - {resource: nvidia.com/mig-3g.40gb, ids: [MIG-0e000000-0002-4000-8000-000000000001]}
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg, sim := simulatedAttribution(t, s)
	for _, name := range []string{"old", "gone", "old2", "gone2"} {
		if !sim.Kubelet.RemovePod("ml", name) {
			t.Fatalf("pod ml/%s not served", name)
		}
	}
	// The Pods API cache hears of the deletions through its watch.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, ok := cfg.Metadata.Pod("ml", "gone2"); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the metadata source still lists the removed pods")
		}
	}
	// GPM reads a MIG instance's activity between two scrapes.
	clk := &testClock{t: testNow}
	e := newResolvedExporter(t, s, sim, attribution.New(cfg), func(c *Config) {
		c.NVML, c.Now = s.NVML(testStart, clk.now), clk.now
	})
	scrapeText(t, e, 10*time.Second)
	clk.set(testNow.Add(15 * time.Second))
	out := scrapeText(t, e, 10*time.Second)
	check, absent := oracleChecks(out)
	const gib = 1 << 30
	unattributed := `workload_kind="unattributed"`

	t.Run("whole GPU now held by another pod", func(t *testing.T) {
		gpu := `uuid="GPU-0e000000-0000-4000-8000-000000000000"`
		// Only old's process runs: the device is at its 0.4. fresh has no
		// process: 0.4 × 0/0.4 = 0 and 0 bytes; old's 0.4 × 0.4/0.4 = 0.4
		// and 4 GiB are unattributed.
		check(t, "xpu_utilization_ratio", 0.4, gpu)
		check(t, "xpu_workload_allocated_devices", 1, gpu, `pod="fresh"`)
		check(t, "xpu_workload_utilization_ratio", 0, gpu, `pod="fresh"`)
		check(t, "xpu_workload_memory_used_bytes", 0, gpu, `pod="fresh"`)
		check(t, "xpu_workload_utilization_ratio", 0.4, gpu, unattributed)
		check(t, "xpu_workload_memory_used_bytes", 4*gib, gpu, unattributed)
	})

	t.Run("time-sliced GPU, one replica's pod gone", func(t *testing.T) {
		gpu := `uuid="GPU-0e000000-0000-4000-8000-000000000001"`
		// Device: 0.2 (tsa) + 0.3 (gone) = 0.5. tsa: 0.5 × 0.2/0.5 = 0.2,
		// fresh2: 0 (no process), unattributed: 0.5 × 0.3/0.5 = 0.3.
		check(t, "xpu_utilization_ratio", 0.5, gpu)
		check(t, "xpu_workload_utilization_ratio", 0.2, gpu, `pod="tsa"`)
		check(t, "xpu_workload_utilization_ratio", 0, gpu, `pod="fresh2"`)
		check(t, "xpu_workload_utilization_ratio", 0.3, gpu, unattributed)
		check(t, "xpu_workload_memory_used_bytes", 1*gib, gpu, `pod="tsa"`)
		check(t, "xpu_workload_memory_used_bytes", 0, gpu, `pod="fresh2"`)
		check(t, "xpu_workload_memory_used_bytes", 2*gib, gpu, unattributed)
	})

	t.Run("MIG instance now held by another pod", func(t *testing.T) {
		mig := `uuid="MIG-0e000000-0002-4000-8000-000000000001"`
		// GPM's 0.5 is the instance's, but without per-process samples in
		// MIG it cannot be split: fresh3 is not given it. Memory: fresh3 0,
		// old2's 4 GiB unattributed.
		check(t, "xpu_utilization_ratio", 0.5, mig)
		absent(t, "xpu_workload_utilization_ratio", mig)
		check(t, "xpu_workload_memory_used_bytes", 0, mig, `pod="fresh3"`)
		check(t, "xpu_workload_memory_used_bytes", 4*gib, mig, unattributed)
	})

	t.Run("GPU held by nobody", func(t *testing.T) {
		gpu := `uuid="GPU-0e000000-0000-4000-8000-000000000003"`
		// gone2's 0.3 and 2 GiB, its pod no owner.
		check(t, "xpu_device_owners", 0, gpu)
		check(t, "xpu_workload_utilization_ratio", 0.3, gpu, unattributed)
		check(t, "xpu_workload_memory_used_bytes", 2*gib, gpu, unattributed)
	})
}

// TestEndedPodsHoldNoDevice: the kubelet lists ml/done, a finished Job's
// pod (Succeeded), with GPU 0, which it has since handed to ml/next, and
// ml/failed (Failed) with GPU 1, now idle (kubernetes/kubernetes#119423).
// GPU 0 is ml/next's alone: 1 owner, allocated 1 device (counting ml/done
// made 2 owners of 1/2 each, billing a finished Job for half the GPU). GPU
// 1 has no owner (it was ml/failed's, with 1). Two ended pods are counted,
// not ml/cpu, a finished CPU-only Job's pod the kubelet lists too, with no
// device (probe I, PI6).
func TestEndedPodsHoldNoDevice(t *testing.T) {
	s, err := demo.Parse([]byte(`node: ended
defaults: {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB}
devices:
  - uuid: GPU-0f000000-0000-4000-8000-000000000000
    processes: [{pid: 9001, pod: ml/next, memory_used: 4GiB, utilization: 0.4}]
  - uuid: GPU-0f000000-0000-4000-8000-000000000001
kubernetes:
  pods:
    - {namespace: ml, name: done,   uid: 0f000000-0000-4000-8000-0000000000a0, phase: Succeeded, containers: [{name: c, devices: [{resource: nvidia.com/gpu, ids: [GPU-0f000000-0000-4000-8000-000000000000]}]}]}
    - {namespace: ml, name: next,   uid: 0f000000-0000-4000-8000-0000000000a1, containers: [{name: c, devices: [{resource: nvidia.com/gpu, ids: [GPU-0f000000-0000-4000-8000-000000000000]}]}]}
    - {namespace: ml, name: failed, uid: 0f000000-0000-4000-8000-0000000000a2, phase: Failed, containers: [{name: c, devices: [{resource: nvidia.com/gpu, ids: [GPU-0f000000-0000-4000-8000-000000000001]}]}]}
    - {namespace: ml, name: cpu,    uid: 0f000000-0000-4000-8000-0000000000a3, phase: Succeeded, containers: [{name: c}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	out := scrapeText(t, newAttributedExporterFor(t, s), 10*time.Second)
	check, absent := oracleChecks(out)
	check(t, "xpu_device_owners", 1, `gpu="0"`)
	check(t, "xpu_workload_allocated_devices", 1, `gpu="0"`, `pod="next"`)
	absent(t, "xpu_workload_allocated_devices", `pod="done"`)
	check(t, "xpu_device_owners", 0, `gpu="1"`)
	absent(t, "xpu_workload_allocated_devices", `pod="failed"`)
	if !strings.Contains(out, "\nxpu_attribution_ended_pods 2\n") {
		t.Error("the two ended pods are not counted in xpu_attribution_ended_pods")
	}
}

// TestPerVendorExporterLeavesOthersIDs: the chart runs one exporter per
// vendor on a node of two. On the mixed node (2 H100s, 2 Gaudi 2s, a pod
// on each device), the NVIDIA exporter places its two pods and leaves the
// Gaudi pods' IDs to the Gaudi exporter, and the reverse: 0 unknown IDs
// each, not 2 (found by probing: XpuExporterDown fired on every mixed
// node). Each still counts an ID of its own vendor that names no device.
func TestPerVendorExporterLeavesOthersIDs(t *testing.T) {
	for _, c := range []struct {
		collector, vendor string
	}{{"nvidia", "nvidia"}, {"gaudi", "habana"}} {
		s := loadScenario(t, "mixed")
		gaudiTable(t, s)
		e := newAttributedExporterWith(t, s, map[string]bool{c.collector: true, "attribution": true}, func() time.Time { return testNow },
			func(cfg *Config) { cfg.HLSMIPath = selfPath(t) })
		out := scrapeText(t, e, 10*time.Second)
		if !strings.Contains(out, "\nxpu_attribution_unknown_device_ids 0\n") {
			t.Errorf("%s exporter: %s, want 0", c.collector, grepLines(out, "xpu_attribution_unknown_device_ids"))
		}
		check, _ := oracleChecks(out)
		check(t, "xpu_device_owners", 1, `gpu="0"`, `vendor="`+c.vendor+`"`)
		check(t, "xpu_device_owners", 1, `gpu="1"`, `vendor="`+c.vendor+`"`)
	}
}

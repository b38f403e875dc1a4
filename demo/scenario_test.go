package demo

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDefaultScenario(t *testing.T) {
	s := Default()
	if len(s.Devices) < 8 {
		t.Fatalf("the default scenario has %d GPUs, want at least 8", len(s.Devices))
	}
	migs := 0
	for _, d := range s.Devices {
		if d.Model != "NVIDIA H100 80GB HBM3" {
			t.Errorf("device %s: model %q did not come from defaults", d.UUID, d.Model)
		}
		migs += len(d.MIG)
	}
	if migs < 2 {
		t.Errorf("want a GPU with several MIG instances, got %d instances", migs)
	}
}

// TestSmallestScenariosStart starts, for each vendor, a device given only
// what Parse requires: whatever Parse accepts, the simulator must serve,
// not crash on a field left to its default.
func TestSmallestScenariosStart(t *testing.T) {
	for _, dev := range []string{
		"{model: NVIDIA H100 80GB HBM3, memory_total: 80GiB}",
		"{vendor: amd, model: AMD Instinct MI300X OAM, memory_total: 192GiB, power_limit_watts: 750}",
		"{vendor: amd, model: AMD Instinct MI300X OAM, memory_total: 192GiB, power_limit_watts: 750, partitions: [{}, {}]}",
		"{vendor: gaudi, model: HL-325L, memory_total: 128GiB}",
	} {
		s, err := Parse([]byte("node: small\ndevices:\n  - " + dev + "\n"))
		if err != nil {
			t.Errorf("%s: %v", dev, err)
			continue
		}
		a, err := s.StartAttribution()
		if err != nil {
			t.Errorf("%s: %v", dev, err)
			continue
		}
		a.Close()
	}
}

// started starts s's simulated sources for the test, closed with it.
func started(t *testing.T, s *Scenario) *Attribution {
	t.Helper()
	a, err := s.StartAttribution()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// slurmNode is a one-GPU scenario for the slurm section's parse errors.
const slurmNode = "devices:\n  - {model: X, memory_total: 1GiB}\n"

func TestParseErrors(t *testing.T) {
	const (
		gpu1 = "GPU-2b149611-0000-4000-8000-000000000001"
		gpu2 = "GPU-2b149611-0000-4000-8000-000000000002"
		mig1 = "MIG-2b149611-0000-4000-8000-000000000001"
	)
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"procfs_hidden on a Gaudi", "devices:\n  - {vendor: gaudi, model: HL-225, memory_total: 96GiB, processes: [{pid: 1, unit: a.service, procfs_hidden: true}]}\n", "devices[0]: processes[0].procfs_hidden: only NVML lists a process procfs does not show"},
		{"empty", "node: x\n", "devices: a scenario needs at least one device"},
		{"unknown top-level key", "nodes: x\n", "field nodes not found"},
		{"missing model", "devices:\n  - memory_total: 1GiB\n", "devices[0]: model: missing"},
		{"unknown metric", "devices:\n  - {model: X, memory_total: 1GiB, metrics: {utilisation: 1}}\n", "devices[0]: metrics.utilisation: unknown metric"},
		{"bad quantity", "devices:\n  - {model: X, memory_total: 80 gigs}\n", `"80 gigs" is not a number or byte size`},
		{"min above max", "devices:\n  - {model: X, memory_total: 1GiB, metrics: {power: {min: 9, max: 1}}}\n", "min 9 is above max 1"},
		{"bad shape", "devices:\n  - {model: X, memory_total: 1GiB, metrics: {power: {shape: zigzag, min: 1, max: 2}}}\n", `unknown shape "zigzag"`},
		{"negative rate", "devices:\n  - {model: X, memory_total: 1GiB, metrics: {energy: {rate: -1}}}\n", "rate must be from 0 to 1e+15 per second"},
		// Found by fuzzing: each of these served +Inf or NaN.
		{"byte size overflowing", "devices:\n  - {model: X, memory_total: 1GiB, metrics: {power: 1e308GiB}}\n", `"1e308GiB" is not a number or byte size`},
		{"infinite rate", "devices:\n  - {model: X, memory_total: 1GiB, metrics: {energy: {rate: .inf}}}\n", "rate must be from 0 to 1e+15 per second"},
		{"NaN phase", "devices:\n  - {model: X, memory_total: 1GiB, metrics: {utilization: {min: 0, max: 1, phase: .nan}}}\n", "phase NaN is not a fraction of a period"},
		{"bad fault", "devices:\n  - {model: X, memory_total: 1GiB, faults: {unsupported: [warp_drive]}}\n", `faults.unsupported: unknown call "warp_drive"`},
		{"bad hang_for", "devices:\n  - {model: X, memory_total: 1GiB, faults: {hang: [power], hang_for: soon}}\n", `faults.hang_for: "soon"`},
		{"bad profile", "devices:\n  - {model: X, memory_total: 1GiB, mig: [{profile: 9g.1gb}]}\n", "mig[0].profile"},
		{"negative pidfd limit", "pidfd_limit: -1\ndevices:\n  - {model: X, memory_total: 1GiB}\n", "pidfd_limit: -1"},
		{"MIG slots falling", "devices:\n  - {model: X, memory_total: 80GiB, mig: [{profile: 1g.10gb, gpu_instance: 1, slot: 3}, {profile: 1g.10gb, gpu_instance: 2, slot: 2}]}\n", "mig[1].slot: 2; slots rise from entry to entry (from 4 here) and a GPU has 7 (0..6)"},
		{"MIG slot past the last", "devices:\n  - {model: X, memory_total: 80GiB, mig: [{profile: 1g.10gb, gpu_instance: 1, slot: 6}, {profile: 1g.10gb, gpu_instance: 2}]}\n", "mig[1].slot: 7;"},
		{"too many slices", "devices:\n  - {model: X, memory_total: 1GiB, mig: [{profile: 4g.40gb, gpu_instance: 1}, {profile: 4g.40gb, gpu_instance: 2}]}\n", "use 8 compute slices"},
		{"duplicate uuid", "devices:\n  - {model: X, memory_total: 1GiB, uuid: " + gpu1 + "}\n  - {model: X, memory_total: 1GiB, uuid: " + gpu2 + "}\n  - {model: X, memory_total: 1GiB, uuid: " + gpu1 + "}\n", "devices[2]: uuid: " + gpu1 + " is already used by devices[0]"},
		{"MIG uuid of another device", "devices:\n  - {model: X, memory_total: 1GiB, mig: [{profile: 1g.10gb, uuid: " + mig1 + "}]}\n  - {model: X, memory_total: 1GiB, mig: [{profile: 1g.10gb, uuid: " + mig1 + "}]}\n", "devices[1]: mig[0].uuid: " + mig1 + " is already used by devices[0].mig[0]"},
		// The exporter's device-ID parser refuses these, so a pod holding
		// one would never be attributed (probe-http 14).
		{"uuid not NVML's", "devices:\n  - {model: X, memory_total: 1GiB, uuid: GPU-k0}\n", `devices[0]: uuid: "GPU-k0" is not an NVML GPU UUID (GPU-, then 8-4-4-4-12 hexadecimal digits)`},
		{"uuid with a replica suffix", "devices:\n  - {model: X, memory_total: 1GiB, uuid: \"GPU-2b149611-0000-4000-8000-000000000000::1\"}\n", `uuid: "GPU-2b149611-0000-4000-8000-000000000000::1" is not an NVML GPU UUID`},
		{"MIG uuid for a GPU", "devices:\n  - {model: X, memory_total: 1GiB, uuid: MIG-2b149611-0000-4000-8000-000000000000}\n", `uuid: "MIG-2b149611-0000-4000-8000-000000000000" is not an NVML GPU UUID`},
		{"MIG uuid not NVML's", "devices:\n  - {model: X, memory_total: 1GiB, mig: [{profile: 1g.10gb, uuid: MIG-1}]}\n", `devices[0]: mig[0].uuid: "MIG-1" is not an NVML MIG device UUID (MIG-, then 8-4-4-4-12 hexadecimal digits, or MIG-GPU-<GPU UUID>/<gpu instance>/<compute instance> before R470)`},
		{"GPU uuid for a MIG device", "devices:\n  - {model: X, memory_total: 1GiB, mig: [{profile: 1g.10gb, uuid: GPU-2b149611-0000-4000-8000-000000000009}]}\n", `mig[0].uuid: "GPU-2b149611-0000-4000-8000-000000000009" is not an NVML MIG device UUID`},
		{"duplicate pid", "devices:\n  - {model: X, memory_total: 1GiB, processes: [{pid: 7}, {pid: 7}]}\n", "processes[1].pid: 7 listed twice"},
		{"processes on a MIG parent", "devices:\n  - {model: X, memory_total: 1GiB, processes: [{pid: 7}], mig: [{profile: 1g.10gb}]}\n", "runs processes in its MIG instances"},
		{"bad throttle reason", "devices:\n  - {model: X, memory_total: 1GiB, throttle_reasons: [tired]}\n", `unknown reason "tired"`},
		{"negative power limit", "devices:\n  - {model: X, memory_total: 1GiB, power_limit_watts: -700}\n", "power_limit_watts: -700..-700 is outside 0..10000"},
		// Found by probing: the simulated amdgpu derived its power1_cap and
		// default power from a limit that was not there, and crashed.
		{"AMD GPU without a power limit", "devices:\n  - {vendor: amd, model: AMD Instinct MI300X OAM, memory_total: 192GiB}\n", "devices[0]: power_limit_watts: missing"},
		// Memory a device cannot have: it was cut to memory_total, and
		// processes were served as stated, above the device (probe-http 11).
		{"memory_used above memory_total", "devices:\n  - {model: X, memory_total: 80GiB, metrics: {memory_used: 100GiB}}\n", "devices[0]: metrics.memory_used: up to 100 GiB, more than memory_total (80 GiB)"},
		// 79.75 + 0.5 = 80.25 GiB.
		{"memory_used and memory_reserved above memory_total", "devices:\n  - {model: X, memory_total: 80GiB, metrics: {memory_used: {min: 60GiB, max: 79.75GiB}, memory_reserved: 512MiB}}\n", "devices[0]: metrics.memory_used: up to 79.75 GiB and memory_reserved up to 0.5 GiB, more than memory_total (80 GiB)"},
		{"a process above memory_total", "devices:\n  - {model: X, memory_total: 80GiB, processes: [{pid: 5, memory_used: 200GiB}]}\n", "devices[0]: memory_total: 80 GiB, less than its processes' memory_used, up to 200 GiB together"},
		// 50 + 40 = 90 GiB, the sine's top and the fixed value.
		{"processes together above memory_total", "devices:\n  - {model: X, memory_total: 80GiB, processes: [{pid: 5, memory_used: {min: 10GiB, max: 50GiB}}, {pid: 6, memory_used: 40GiB}]}\n", "devices[0]: memory_total: 80 GiB, less than its processes' memory_used, up to 90 GiB together"},
		{"a MIG instance above its profile", "devices:\n  - {model: X, memory_total: 80GiB, mig: [{profile: 1g.10gb, memory_used: 12GiB}]}\n", "devices[0]: mig[0].memory_used: up to 12 GiB, more than a 1g.10gb instance has (10 GiB)"},
		{"a MIG instance using less than nothing", "devices:\n  - {model: X, memory_total: 80GiB, mig: [{profile: 1g.10gb, memory_used: -1GiB}]}\n", "devices[0]: mig[0].memory_used: as low as -1 GiB"},
		{"a MIG instance's processes above its profile", "devices:\n  - {model: X, memory_total: 80GiB, mig: [{profile: 1c.3g.40gb, processes: [{pid: 1, memory_used: 41GiB}]}]}\n", "devices[0]: mig[0]: a 1c.3g.40gb instance has 40 GiB, less than its processes' memory_used, up to 41 GiB together"},
		// Used memory holds every process's (nvml.h, nvmlMemory_t: "Sum
		// of Reserved and Allocated device memory"): the default demo's
		// GPU 3 and its 3g.40gb instance were such (probe-http 11).
		{"device below its process", "devices:\n  - {model: X, memory_total: 80GiB, metrics: {memory_used: {shape: noise, min: 60GiB, max: 72GiB}}, processes: [{pid: 1, memory_used: 66GiB}]}\n", "devices[0]: metrics.memory_used: as low as 60 GiB, less than its processes' memory_used, up to 66 GiB together"},
		{"MIG instance below its process", "devices:\n  - {model: X, memory_total: 80GiB, mig: [{profile: 3g.40gb, memory_used: {min: 20GiB, max: 36GiB}, processes: [{pid: 1, memory_used: 30GiB}]}]}\n", "devices[0]: mig[0].memory_used: as low as 20 GiB, less than its processes' memory_used, up to 30 GiB together"},
		// 4 GiB (the first instance's process, its memory_used left out) + 7 GiB.
		{"GPU in MIG mode below its instances", "devices:\n  - {model: X, memory_total: 80GiB, metrics: {memory_used: 10GiB}, mig: [{profile: 2g.20gb, gpu_instance: 1, processes: [{pid: 1, memory_used: 4GiB}]}, {profile: 3g.40gb, gpu_instance: 2, memory_used: 7GiB}]}\n", "devices[0]: metrics.memory_used: as low as 10 GiB, less than its MIG instances' memory_used, up to 11 GiB together"},
		// Instance 0's profile is refused; instance 1's 30 GiB still count.
		{"GPU in MIG mode below its instances, one of no profile", "devices:\n  - {model: X, memory_total: 80GiB, metrics: {memory_used: 10GiB}, mig: [{profile: 9g.1gb, gpu_instance: 1}, {profile: 3g.40gb, gpu_instance: 2, memory_used: 30GiB}]}\n", "devices[0]: metrics.memory_used: as low as 10 GiB, less than its MIG instances' memory_used, up to 30 GiB together"},
		{"memory_total below MIG instances", "devices:\n  - {model: X, memory_total: 40GiB, mig: [{profile: 3g.40gb, gpu_instance: 1, memory_used: 30GiB}, {profile: 3g.40gb, gpu_instance: 2, memory_used: 30GiB}]}\n", "devices[0]: memory_total: 40 GiB, less than its MIG instances' memory_used, up to 60 GiB together"},
		// Counters past what their driver's integer, or the float64 the
		// exporter serves, holds: 1e300 J was served as 9.22e15 J, then
		// stuck (probe-http 11).
		{"energy beyond amdgpu's accumulator", "devices:\n  - {model: X, memory_total: 1GiB, metrics: {energy: {start: 1e300, rate: 510}}}\n", "metrics.energy: 1e+300 rising by 510 a second reaches 1e+300 in 100 years, outside 0..2.81474976710656e+14 (J (counter))"},
		{"energy starting beyond it", "devices:\n  - {model: X, memory_total: 1GiB, metrics: {energy: {start: 1.8e16, rate: 0}}}\n", "metrics.energy: 1.8e+16..1.8e+16 is outside 0..2.81474976710656e+14 (J (counter))"},
		// 1e6 J/s × 3,155,760,000 s (100 years of 365.25 days).
		{"energy passing it within a century", "devices:\n  - {model: X, memory_total: 1GiB, metrics: {energy: {start: 0, rate: 1e6}}}\n", "metrics.energy: 0 rising by 1e+06 a second reaches 3.15576e+15 in 100 years, outside 0..2.81474976710656e+14"},
		{"ECC count beyond float64's integers", "devices:\n  - {model: X, memory_total: 1GiB, metrics: {ecc_corrected: 1e300}}\n", "metrics.ecc_corrected: 1e+300..1e+300 is outside 0..9.007199254740992e+15"},
		// 10/s × 3,155,760,000 s = 3.1558e10, above 4,294,967,295.
		{"PCIe replays beyond NVML's unsigned int", "devices:\n  - {model: X, memory_total: 1GiB, metrics: {pcie_replays: {start: 0, rate: 10}}}\n", "metrics.pcie_replays: 0 rising by 10 a second reaches 3.15576e+10 in 100 years, outside 0..4.294967295e+09"},
		{"utilization above 1", "devices:\n  - {model: X, memory_total: 1GiB, metrics: {utilization: 7.5}}\n", "metrics.utilization: 7.5..7.5 is outside 0..1"},
		{"P-state 99", "devices:\n  - {model: X, memory_total: 1GiB, metrics: {performance_state: 99}}\n", "metrics.performance_state: 99..99 is outside 0..15"},
		{"generator leaving its range", "devices:\n  - {model: X, memory_total: 1GiB, metrics: {fan_speed: {min: 0.2, max: 1.4}}}\n", "metrics.fan_speed: 0.2..1.4 is outside 0..1"},
		{"process utilization", "devices:\n  - {model: X, memory_total: 1GiB, processes: [{pid: 1, utilization: 2}]}\n", "processes[0].utilization: 2..2 is outside 0..1"},
		{"duty busy longer than period", "devices:\n  - {model: X, memory_total: 1GiB, processes: [{pid: 1, duty: {period: 10s, busy: 11s}}]}\n", "processes[0].duty: busy"},
		{"unknown process list", "devices:\n  - {model: X, memory_total: 1GiB, processes: [{pid: 1, lists: [cuda]}]}\n", `processes[0].lists: unknown list "cuda"`},
		{"negative call latency", "devices:\n  - {model: X, memory_total: 1GiB, call_latency: -1ms}\n", `call_latency: "-1ms" is not a duration from 0 to 1s`},
		{"call latency above a second", "defaults: {call_latency: 2s}\ndevices:\n  - {model: X, memory_total: 1GiB}\n", `devices[0]: call_latency: "2s"`},
		{"bad sample period", "devices:\n  - {model: X, memory_total: 1GiB, sample_period: 5s}\n", "sample_period"},
		{"failing link that does not exist", "devices:\n  - {model: X, memory_total: 1GiB, nvlinks: 2, faults: {failing_links: [4]}}\n", "faults.failing_links: link 4 does not exist"},
		{"compute instance larger than its GPU instance", "devices:\n  - {model: X, memory_total: 1GiB, mig: [{profile: 4c.3g.40gb}]}\n", "mig[0].profile"},
		{"unknown kubernetes key", "devices:\n  - {model: X, memory_total: 1GiB}\nkubernetes:\n  pods:\n    - {namespace: a, name: p, uid: u, containrs: []}\n", "line 5: field containrs not found"},
		{"kubernetes pod without uid", "devices:\n  - {model: X, memory_total: 1GiB}\nkubernetes:\n  pods:\n    - {namespace: a, name: p}\n", "kubernetes: pods[0]: pod a/p: namespace, name and uid are required"},
		{"processes on a GPU in MIG mode", "devices:\n  - {model: X, memory_total: 1GiB, mig_mode: true, processes: [{pid: 7}]}\n", "runs processes in its MIG instances"},
		// A process has one cgroup and one user: the demo's procfs can
		// give it only one, which served one GPU's usage as the other's
		// owner's (probe-http 15).
		{"one PID, two owners", "devices:\n  - {model: X, memory_total: 1GiB, processes: [{pid: 100, unit: a.service, user: root, command: a}]}\n  - {model: X, memory_total: 1GiB, processes: [{pid: 100, unit: b.service, user: bob, command: b}]}\n",
			`devices[1]: process 100: unit "b.service", user "bob", command "b", but devices[0]'s process 100 has unit "a.service", user "root", command "a"; a process has one owner on every device it uses`},
		{"one PID, two pods", "devices:\n  - {model: X, memory_total: 1GiB, processes: [{pid: 7, pod: ml/a}]}\n  - {model: X, memory_total: 1GiB, mig: [{profile: 1g.10gb, processes: [{pid: 7, pod: ml/b}]}]}\nkubernetes:\n  pods:\n    - {namespace: ml, name: a, uid: u1}\n    - {namespace: ml, name: b, uid: u2}\n",
			`devices[1]: process 7: pod "ml/b", but devices[0]'s process 7 has pod "ml/a"`},
		{"one PID, two environments", "devices:\n  - {model: X, memory_total: 1GiB, processes: [{pid: 7, environ: {SLURM_JOB_ID: \"1\"}}]}\n  - {model: X, memory_total: 1GiB, processes: [{pid: 7}]}\n",
			`devices[1]: process 7: environ {}, but devices[0]'s process 7 has environ {SLURM_JOB_ID=1}`},
		{"environment variable with =", "devices:\n  - {model: X, memory_total: 1GiB, processes: [{pid: 7, environ: {\"A=B\": x}}]}\n", `environ "A=B"="x" is no environment variable`},
		{"unknown Slurm version", slurmNode + "slurm: {version: \"17.11\", jobs: [{id: \"1\", user: a}]}\n", `slurm.version: "17.11"`},
		{"unknown proctrack", slurmNode + "slurm: {proctrack: pgid, jobs: [{id: \"1\", user: a}]}\n", `slurm.proctrack: "pgid"`},
		{"shards without shards_per_gpu", slurmNode + "slurm: {jobs: [{id: \"1\", user: a, shards: {0: 1}}]}\n", "slurm.jobs[0].shards: 1 of GPU 0's 0 shards"},
		{"more shards than the GPU has", slurmNode + "slurm: {shards_per_gpu: 4, jobs: [{id: \"1\", user: a, shards: {0: 3}}, {id: \"2\", user: b, shards: {0: 2}}]}\n", "5 shards of GPU 0, which has 4"},
		{"shards of a GPU held whole", slurmNode + "slurm: {shards_per_gpu: 4, jobs: [{id: \"1\", user: a, gpus: [0], shards: {0: 1}}]}\n", "GPU 0 is in gpus too"},
		{"array task out of the array", slurmNode + "slurm: {jobs: [{id: \"1\", user: a, array: {task: 3, tasks: 2}}]}\n", "slurm.jobs[0].array: task 3 of 2"},
		{"a forgotten job holding a GPU", slurmNode + "slurm: {jobs: [{id: \"1\", user: a, gpus: [0], gone: true}]}\n", "slurm.jobs[0].gone"},
		{"requeue without a delay", slurmNode + "slurm: {jobs: [{id: \"1\", user: a, requeue_gpus: [0]}]}\n", "requeue_gpus: without requeue_after"},
		{"bad requeue delay", slurmNode + "slurm: {jobs: [{id: \"1\", user: a, requeue_after: -1s}]}\n", `requeue_after: "-1s"`},
		{"job listed twice", slurmNode + "slurm: {jobs: [{id: \"1\", user: a}, {id: \"1\", user: b}]}\n", "job 1 twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestOneProcessOnSeveralGPUs: one process may drive several GPUs, with
// one owner on all of them and its own memory on each.
func TestOneProcessOnSeveralGPUs(t *testing.T) {
	s, err := Parse([]byte(`devices:
  - {model: X, memory_total: 1GiB, processes: [{pid: 100, unit: a.service, user: root, command: a, memory_used: 100MiB}]}
  - {model: X, memory_total: 1GiB, processes: [{pid: 100, unit: a.service, user: root, command: a, memory_used: 200MiB}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	started(t, s)
}

// Every mistake of a scenario is named at once, value mistakes caught while
// decoding included.
func TestParseNamesEveryProblem(t *testing.T) {
	_, err := Parse([]byte(`devices:
  - model: X
    memory_total: 1GiB
    power_limit_watts: -700
    metrics: {utilization: 7.5, power: {min: 9, max: 1}, energy: {rate: -1}, warp: 1}
`))
	if err == nil {
		t.Fatal("the scenario was accepted")
	}
	for _, want := range []string{"power_limit_watts: -700", "metrics.utilization: 7.5", "min 9 is above max 1", "rate must be from 0", "metrics.warp: unknown metric"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %q:\n%v", want, err)
		}
	}
}

func TestValueGenerators(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	parse := func(y string) Value {
		t.Helper()
		s, err := Parse([]byte("devices:\n  - {model: X, memory_total: 1GiB, metrics: {power: " + y + "}}\n"))
		if err != nil {
			t.Fatal(err)
		}
		return s.Devices[0].Metrics["power"]
	}
	fixed := parse("80GiB")
	if got := fixed.At(start, start.Add(time.Hour)); got != 80*(1<<30) {
		t.Errorf("fixed 80GiB = %v", got)
	}
	ctr := parse("{start: 100, rate: 2}")
	if got := ctr.At(start, start.Add(10*time.Second)); got != 120 {
		t.Errorf("counter after 10s = %v, want 120", got)
	}
	// A sawtooth's position is the time since the epoch modulo the period,
	// plus the phase, wrapped into [0, 1). 2026-01-01T00:00:00Z is
	// 1,767,225,600 s since the epoch, a whole number of minutes, so at
	// 15 s past it a 1m sawtooth is at 15/60 = 0.25; phase 0.9 takes it to
	// 1.15, wrapped to 0.15: 10 + (20−10) × 0.15 = 11.5. At 45 s: 0.75 +
	// 0.9 = 1.65 → 0.65: 16.5.
	saw := parse("{shape: sawtooth, min: 10, max: 20, period: 1m, phase: 0.9}")
	for at, want := range map[time.Duration]float64{15 * time.Second: 11.5, 45 * time.Second: 16.5} {
		if got := saw.At(start, start.Add(at)); math.Abs(got-want) > 1e-9 {
			t.Errorf("sawtooth at +%v = %v, want %v", at, got, want)
		}
	}
	for _, shape := range []string{"sine", "sawtooth", "square", "noise"} {
		v := parse("{shape: " + shape + ", min: 10, max: 20, period: 1m}")
		lo, hi := math.Inf(1), math.Inf(-1)
		for i := range 600 {
			x := v.At(start, start.Add(time.Duration(i)*100*time.Millisecond))
			lo, hi = math.Min(lo, x), math.Max(hi, x)
		}
		if lo < 10 || hi > 20 || hi-lo < 5 {
			t.Errorf("%s over one period ranged %v..%v, want a spread within 10..20", shape, lo, hi)
		}
	}
}

// TestLoginSessionsUnderTheirUsersSlice: a process with a user and no unit,
// job or pod runs in a login session, under user-<uid>.slice of its own
// user, not root's (found by probing: alice and bob both in user-0.slice).
func TestLoginSessionsUnderTheirUsersSlice(t *testing.T) {
	s, err := Parse([]byte("devices:\n  - {model: X, memory_total: 1GiB, processes: [{pid: 7, user: alice}, {pid: 8, user: bob}, {pid: 9}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	a := started(t, s)
	// Users are numbered from 1000 in the order first met; root is 0.
	for pid, want := range map[int]string{7: "user-1000.slice", 8: "user-1001.slice", 9: "user-0.slice"} {
		b, err := os.ReadFile(filepath.Join(a.Procfs, fmt.Sprint(pid), "cgroup"))
		if err != nil {
			t.Fatal(err)
		}
		if got := string(b); got != "0::/user.slice/"+want+"/session-1.scope\n" {
			t.Errorf("pid %d: cgroup %q, want one under %s", pid, got, want)
		}
	}
}

// TestKubernetesSectionIsYAML12: the kubernetes section is read like the
// rest of the scenario, as YAML 1.2, where only true and false are
// booleans. y, n, yes, no, on and off are valid namespace, pod, container
// and label values that YAML 1.1 reads as booleans, which made them
// "true" and "false" there while a process's pod: y/n, read as YAML 1.2,
// named no pod (found by probing).
func TestKubernetesSectionIsYAML12(t *testing.T) {
	for _, w := range [][2]string{{"y", "n"}, {"yes", "no"}, {"on", "off"}, {"Y", "N"}} {
		ns, name := w[0], w[1]
		t.Run(ns+"/"+name, func(t *testing.T) {
			s, err := Parse(fmt.Appendf(nil, `node: yaml-node
devices:
  - {model: X, memory_total: 1GiB, processes: [{pid: 7, pod: %[1]s/%[2]s, container: %[2]s}]}
kubernetes:
  pods:
    - namespace: %[1]s
      name: %[2]s
      uid: ff000000-0000-4000-8000-0000000000a0
      labels: {team: %[1]s}
      ownerReferences: [{apiVersion: batch/v1, kind: Job, name: %[2]s, controller: true}]
      containers: [{name: %[2]s}]
`, ns, name))
			if err != nil {
				t.Fatal(err)
			}
			p := s.Kubernetes.Pods[0]
			got := []string{p.Namespace, p.Name, p.Labels["team"], p.OwnerReferences[0].Name, p.Containers[0].Name}
			if want := []string{ns, name, ns, name, name}; !slices.Equal(got, want) {
				t.Errorf("namespace, name, label, owner and container %q, want %q", got, want)
			}
		})
	}
}

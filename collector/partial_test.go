package collector

import (
	"fmt"
	"github.com/xpu-exporter/xpu_exporter/vendors/reading"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/xpu-exporter/xpu_exporter/attribution"
	"github.com/xpu-exporter/xpu_exporter/demo"
)

// Readings that fail for part of a device leave out what they would have
// made up, never a partial or made-up value.
func TestPartialReadings(t *testing.T) {
	s, err := demo.Parse([]byte(`
devices:
  - model: X
    memory_total: 80GiB
    nvlinks: 4
    metrics: {nvlink_replay_errors: 2, nvlink_tx: 1e9, nvlink_rx: 1e9}
    throttle_reasons: [sw_power_cap]
    faults: {failing_links: [2], errors: [supported_throttle_reasons]}
  - model: X
    memory_total: 80GiB
    nvlinks: 4
    metrics: {nvlink_replay_errors: 2, nvlink_tx: 1e9, nvlink_rx: 1e9}
    throttle_reasons: [sw_power_cap]
  - model: X
    memory_total: 80GiB
    mig:
      - {profile: 3g.40gb, gpu_instance: 1}
    faults: {errors: [mig_attributes]}
`))
	if err != nil {
		t.Fatal(err)
	}
	e := newTestExporter(t, s, map[string]bool{"nvidia": true, "attribution": true})
	out := scrapeText(t, e, 10*time.Second)
	lines := func(prefix string, matchers ...string) int {
		n := 0
		for _, l := range strings.Split(out, "\n") {
			ok := strings.HasPrefix(l, prefix)
			for _, m := range matchers {
				ok = ok && strings.Contains(l, m)
			}
			if ok {
				n++
			}
		}
		return n
	}

	// GPU 0's link 2 fails to read. A sum over the other three would drop
	// by a quarter and read as a counter reset: no sum at all. GPU 1 sums
	// its four links: 4 × 2 replay errors = 8.
	if n := lines("xpu_nvlink_errors_total{", `gpu="0"`); n != 0 {
		t.Errorf("GPU 0: %d NVLink error sums over a partial set of links, want none", n)
	}
	if n := lines("xpu_nvlink_data_bytes_total{", `gpu="0"`); n != 0 {
		t.Errorf("GPU 0: %d NVLink data sums over a partial set of links, want none", n)
	}
	if v := sample(t, out, "xpu_nvlink_errors_total", `gpu="1"`, `type="replay"`); v != 8 {
		t.Errorf("GPU 1 replay errors %v, want 4 links × 2 = 8", v)
	}
	// The failing link's state is unknown and left out of the count; the
	// other three are up.
	if v := sample(t, out, "xpu_nvlink_links", `gpu="0"`, `state="up"`); v != 3 {
		t.Errorf("GPU 0: %v links up, want the 3 that answered", v)
	}
	if v := sample(t, out, "xpu_nvlink_links", `gpu="0"`, `state="down"`); v != 0 {
		t.Errorf("GPU 0: %v links down, want 0", v)
	}

	// GPU 0 cannot say which throttle reasons it can report: none is
	// emitted rather than nine, some perhaps never reportable. GPU 1 emits
	// all nine its supported mask names.
	if n := lines("xpu_clock_throttled{", `gpu="0"`); n != 0 {
		t.Errorf("GPU 0: %d throttle reasons without the supported mask, want none", n)
	}
	if n := lines("xpu_clock_throttled{", `gpu="1"`); n != 9 {
		t.Errorf("GPU 1: %d throttle reasons, want 9", n)
	}

	// GPU 2's MIG instance cannot tell its slices: its fraction of the GPU
	// is unknown and is not reported as a whole GPU.
	for _, d := range e.Snapshot(t.Context()).Devices {
		if d.MIG != nil && d.MIG.Fraction != 0 {
			t.Errorf("MIG instance fraction %v from unreadable attributes", d.MIG.Fraction)
		}
	}
}

// AllocatedDevices is the one definition /devices and the workload family
// share.
func TestAllocatedDevices(t *testing.T) {
	mig := func(f float64) *Device { return &Device{MIG: &MIGInstance{Fraction: f}} }
	for _, tc := range []struct {
		name  string
		d     *Device
		share float64
		want  float64
		ok    bool
	}{
		{"whole GPU", &Device{}, 1, 1, true},
		{"one of four replicas", &Device{}, 0.25, 0.25, true},
		// A 3g instance on a 7-slice GPU: 3/7 of a GPU.
		{"MIG 3g", mig(3.0 / 7), 1, 3.0 / 7, true},
		// One of two replicas of a 2g instance: 1/2 × 2/7 = 1/7.
		{"replica of a MIG 2g", mig(2.0 / 7), 0.5, 1.0 / 7, true},
		{"MIG fraction unknown", mig(0), 1, 0, false},
		{"share unknown", &Device{}, 0, 0, false},
		// Allocated whole (MIG strategy none): the allocation is the GPU's.
		{"GPU in MIG mode allocated whole", &Device{HasMIG: true}, 1, 1, true},
		// An owner an instance lends its GPU: counted on the instance.
		{"GPU in MIG mode, an instance's owner", &Device{HasMIG: true}, 0, 0, false},
	} {
		got, ok := tc.d.AllocatedDevices(attributionClaim(tc.share))
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("%s: %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func attributionClaim(share float64) attribution.Claim {
	return attribution.Claim{Owner: attribution.Owner{Kind: attribution.Kubernetes, Pod: "p"}, Share: share}
}

// Slurm counts a node's GPUs with each GPU in MIG mode replaced by its MIG
// devices in handle order.
func TestGRESIndices(t *testing.T) {
	whole := func(i string, up bool) *Device { return &Device{Vendor: "nvidia", Index: i, Up: up} }
	mig := func(i string, handle int) *Device {
		return &Device{Vendor: "nvidia", Index: i, Up: true, MIG: &MIGInstance{Index: handle}}
	}
	gpu0, gpu1, gpu2 := whole("0", true), &Device{Vendor: "nvidia", Index: "1", Up: true, HasMIG: true, MIGListed: true}, whole("2", true)
	h1, h0 := mig("1", 1), mig("1", 0)
	// GPU 0 → 0; GPU 1's MIG handles 0 and 1 → 1 and 2; GPU 2 → 3. The
	// GPU in MIG mode has none.
	got := gresIndices([]*Device{gpu2, h1, gpu0, gpu1, h0}, false, false)
	want := map[*Device]int{gpu0: 0, h0: 1, h1: 2, gpu2: 3}
	if len(got) != len(want) {
		t.Errorf("indices %v, want %v", got, want)
	}
	for d, i := range want {
		if got[d] != i {
			t.Errorf("GPU %s (MIG %v): index %d, want %d", d.Index, d.MIG, got[d], i)
		}
	}
	// GPU 1's instances were not read: GPU 2's number cannot be known.
	unlisted := &Device{Vendor: "nvidia", Index: "1", Up: true, HasMIG: true}
	if got := gresIndices([]*Device{gpu0, unlisted, gpu2}, false, false); len(got) != 1 || got[gpu0] != 0 {
		t.Errorf("without GPU 1's instances: %v, want only GPU 0 → 0", got)
	}
	// Some were read (handle 1), some not: handle 1 cannot be told to be
	// GRES 2 rather than 1, nor GPU 2 to be 3.
	if got := gresIndices([]*Device{gpu0, unlisted, h1, gpu2}, false, false); len(got) != 1 || got[gpu0] != 0 {
		t.Errorf("with GPU 1's instances listed in part: %v, want only GPU 0 → 0", got)
	}
	// GPU 1 in MIG mode with no MIG device, all (none) listed: Slurm counts
	// the GPU itself (gpu_nvml.c, !added_mig). GPU 0 → 0, GPU 1 → 1, GPU 2
	// → 2.
	empty := &Device{Vendor: "nvidia", Index: "1", Up: true, HasMIG: true, MIGListed: true}
	if got := gresIndices([]*Device{gpu0, empty, gpu2}, false, false); len(got) != 3 || got[gpu0] != 0 || got[empty] != 1 || got[gpu2] != 2 {
		t.Errorf("GPU 1 in MIG mode without instances: %v, want GPU 0 → 0, 1 → 1, 2 → 2", got)
	}
	// On a node without MIG a GPU down keeps its place: GPU 2 is still 2.
	down := whole("1", false)
	if got := gresIndices([]*Device{gpu0, down, gpu2}, false, false); got[gpu2] != 2 || got[down] != 1 {
		t.Errorf("with GPU 1 down: %v, want GPU 2 → 2", got)
	}
	// On a node with MIG, a GPU down that an earlier read found outside
	// MIG mode keeps its place: GPU 0 down → 0, GPU 1's handles → 1 and 2,
	// GPU 2 → 3, as when it answered (it cannot have entered MIG mode
	// without a reset, and Slurm numbered its GRES when slurmd started).
	// Never read, its MIG mode is unknown, and so are the indices from it
	// on: GPU 0 and those after it get none.
	lost0 := &Device{Vendor: "nvidia", Index: "0", MIGModeKnown: true}
	if got := gresIndices([]*Device{lost0, gpu1, h0, h1, gpu2}, false, false); len(got) != 4 || got[lost0] != 0 || got[h0] != 1 || got[h1] != 2 || got[gpu2] != 3 {
		t.Errorf("GPU 0 lost, known outside MIG mode: %v, want GPU 0 → 0, handles → 1, 2, GPU 2 → 3", got)
	}
	if got := gresIndices([]*Device{whole("0", false), gpu1, h0, h1, gpu2}, false, false); len(got) != 0 {
		t.Errorf("GPU 0 lost before it was read: %v, want no indices", got)
	}
	// A mixed node: Slurm's numbering of two vendors' devices is not known.
	gaudi0 := &Device{Vendor: "habana", Index: "0", Up: true}
	if got := gresIndices([]*Device{gpu0, gaudi0}, false, false); len(got) != 0 {
		t.Errorf("mixed node: %v, want no indices", got)
	}
	// A Gaudi node alone is numbered like GPUs, by hl-smi index.
	gaudi1 := &Device{Vendor: "habana", Index: "1", Up: true}
	if got := gresIndices([]*Device{gaudi1, gaudi0}, false, false); got[gaudi0] != 0 || got[gaudi1] != 1 {
		t.Errorf("Gaudi node: %v, want hl-smi order", got)
	}
}

// TestGRESByDeviceFile: GPUs 0..3 whose device files are /dev/nvidia2, 0,
// 1 and 3. In NVML's order (AutoDetect=nvml, or Links=) GPU i is GRES i.
// By device file (gres.conf File= without Links=) Slurm sorts the files:
// nvidia0 (GPU 1) → 0, nvidia1 (GPU 2) → 1, nvidia2 (GPU 0) → 2, nvidia3
// (GPU 3) → 3; GPU 2's MIG handles 0 and 1 take GRES 1 and 2 in its place
// when it is in MIG mode, pushing GPU 0 to 3 and GPU 3 to 4.
func TestGRESByDeviceFile(t *testing.T) {
	gpu := func(i string, minor int) *Device {
		return &Device{Vendor: "nvidia", Index: i, Up: true, Minor: reading.Some(minor)}
	}
	g0, g1, g2, g3 := gpu("0", 2), gpu("1", 0), gpu("2", 1), gpu("3", 3)
	check := func(name string, got, want map[*Device]int) {
		t.Helper()
		if len(got) != len(want) {
			t.Errorf("%s: %d indices, want %d", name, len(got), len(want))
		}
		for d, i := range want {
			if g, ok := got[d]; !ok || g != i {
				t.Errorf("%s: GPU %s (MIG %v) → %d (%v), want %d", name, d.Index, d.MIG, g, ok, i)
			}
		}
	}
	devs := []*Device{g0, g1, g2, g3}
	check("NVML order", gresIndices(devs, false, false), map[*Device]int{g0: 0, g1: 1, g2: 2, g3: 3})
	check("device-file order", gresIndices(devs, false, true), map[*Device]int{g1: 0, g2: 1, g0: 2, g3: 3})
	if filesOutOfOrder(devs) != "nvidia" {
		t.Error("files 2, 0, 1, 3 taken for NVML's order")
	}
	if v := filesOutOfOrder([]*Device{gpu("0", 0), gpu("1", 4), gpu("2", 7)}); v != "" {
		t.Errorf("files 0, 4, 7 not taken for NVML's order: %q", v)
	}

	m2 := &Device{Vendor: "nvidia", Index: "2", Up: true, HasMIG: true, MIGListed: true, Minor: reading.Some(1)}
	h0 := &Device{Vendor: "nvidia", Index: "2", Up: true, MIG: &MIGInstance{Index: 0}}
	h1 := &Device{Vendor: "nvidia", Index: "2", Up: true, MIG: &MIGInstance{Index: 1}}
	check("device-file order, GPU 2 in MIG mode", gresIndices([]*Device{g0, g1, m2, h1, h0, g3}, false, true), map[*Device]int{g1: 0, h0: 1, h1: 2, g0: 3, g3: 4})

	// A GPU whose device file is unknown: the order is, and no GPU gets a
	// number.
	check("device file unknown", gresIndices([]*Device{g0, {Vendor: "nvidia", Index: "1", Up: true}}, false, true), map[*Device]int{})
}

// TestGRESOrderAMD: four AMD GPUs probed as cards 1..4 (gpu 0..3, render
// nodes 128..131) at PCI c1, 11, 91 and 41. AutoDetect=rsmi numbers them in
// ROCm SMI's order, by PCI address since ROCm 6.0: 11 (gpu 1) → 0, 41
// (gpu 3) → 1, 91 (gpu 2) → 2, c1 (gpu 0) → 3. By render node (gres.conf
// File= lines, or ROCm before 6.0): gpu i → i. With gpu 3 (41) in DPX, its
// partitions take its place: gpu 1 → 0, gpu 3's partitions → 1 and 2, gpu
// 2 → 3, gpu 0 → 4. A GPU without a PCI address leaves every GPU unnumbered.
func TestGRESOrderAMD(t *testing.T) {
	gpu := func(i, pci string, minor int) *Device {
		return &Device{Vendor: "amd", Index: i, PCIBusID: pci, Up: true, Minor: reading.Some(minor)}
	}
	g0, g1, g2, g3 := gpu("0", "0000:c1:00.0", 128), gpu("1", "0000:11:00.0", 129), gpu("2", "0000:91:00.0", 130), gpu("3", "0000:41:00.0", 131)
	devs := []*Device{g0, g1, g2, g3}
	for _, tc := range []struct {
		name string
		got  map[*Device]int
		want map[*Device]int
	}{
		{"PCI order", gresIndices(devs, false, false), map[*Device]int{g1: 0, g3: 1, g2: 2, g0: 3}},
		{"render node order", gresIndices(devs, false, true), map[*Device]int{g0: 0, g1: 1, g2: 2, g3: 3}},
	} {
		if !maps.Equal(tc.got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if v := filesOutOfOrder(devs); v != "amd" {
		t.Errorf("render nodes out of PCI order not told: %q", v)
	}
	m3 := gpu("3", "0000:41:00.0", 131)
	m3.HasMIG, m3.MIGListed = true, true
	p0 := &Device{Vendor: "amd", Index: "3", PCIBusID: "0000:41:00.0", Up: true, MIG: &MIGInstance{Index: 0}}
	p1 := &Device{Vendor: "amd", Index: "3", PCIBusID: "0000:41:00.0", Up: true, MIG: &MIGInstance{Index: 1}}
	if got, want := gresIndices([]*Device{g0, g1, g2, m3, p1, p0}, false, false), (map[*Device]int{g1: 0, p0: 1, p1: 2, g2: 3, g0: 4}); !maps.Equal(got, want) {
		t.Errorf("gpu 3 in DPX: %v, want %v", got, want)
	}
	if got := gresIndices([]*Device{g0, {Vendor: "amd", Index: "1", Up: true}}, false, false); len(got) != 0 {
		t.Errorf("a GPU without a PCI address: %v, want no indices", got)
	}
	// By render node (File= lines): GPU 3's partition 0 is on its GPU's
	// renderD131, partition 1 on renderD132, after every GPU, so by hand
	// renderD128 g0 0, 129 g1 1, 130 g2 2, 131 p0 3, 132 p1 4 (p1 was
	// placed next to its GPU: probe I, PI5).
	p0.Minor, p1.Minor = reading.Some(131), reading.Some(132)
	if got, want := gresIndices([]*Device{g0, g1, g2, m3, p1, p0}, false, true), (map[*Device]int{g0: 0, g1: 1, g2: 2, p0: 3, p1: 4}); !maps.Equal(got, want) {
		t.Errorf("gpu 3 in DPX, render node order: %v, want %v", got, want)
	}
	// Partition 1 on renderD127 (a node numbered before the GPUs'): first.
	p1.Minor = reading.Some(127)
	if got, want := gresIndices([]*Device{g0, g1, g2, m3, p1, p0}, false, true), (map[*Device]int{p1: 0, g0: 1, g1: 2, g2: 3, p0: 4}); !maps.Equal(got, want) {
		t.Errorf("partition 1 on a lower node: %v, want %v", got, want)
	}
}

// A node that has shown devices of two vendors stays a node of several
// vendors when one vendor's devices are missing from a later snapshot.
func TestSeveralVendorsIsRemembered(t *testing.T) {
	gpu := &Device{Vendor: "nvidia", Index: "0", Up: true}
	gaudi := &Device{Vendor: "habana", Index: "0", Up: true}
	s := &snapshotter{}
	for i, tc := range []struct {
		devs []*Device
		want bool
	}{{[]*Device{gpu}, false}, {[]*Device{gpu, gaudi}, true}, {[]*Device{gpu}, true}} {
		if got := s.severalVendors(tc.devs); got != tc.want {
			t.Errorf("snapshot %d: several vendors %v, want %v", i, got, tc.want)
		}
	}
}

// Series of pods that are gone leave the cache after seriesMaxAge scrapes:
// churning owners cannot grow it without bound.
func TestSeriesCacheForgetsGoneSeries(t *testing.T) {
	m := gauge("test_churn", "A test family.")
	for i := range 100 {
		seriesOf(m, labels{names: []string{"pod"}, values: []string{fmt.Sprint("pod-", i)}})
	}
	kept := func() int {
		seriesMu.RLock()
		defer seriesMu.RUnlock()
		n := 0
		for _, s := range seriesCache {
			if strings.HasPrefix(string(s.text), "xpu_test_churn{") {
				n++
			}
		}
		return n
	}
	if n := kept(); n != 100 {
		t.Fatalf("%d series cached, want 100", n)
	}
	for range 2*seriesMaxAge + 1 {
		sweepSeries()
	}
	if n := kept(); n != 0 {
		t.Errorf("%d series of gone pods still cached after %d scrapes", n, 2*seriesMaxAge+1)
	}
}

package collector

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/xpu-exporter/xpu_exporter/attribution"
	"github.com/xpu-exporter/xpu_exporter/demo"
	"github.com/xpu-exporter/xpu_exporter/internal/syncbuf"
	"github.com/xpu-exporter/xpu_exporter/vendors/nvidia"
)

func podSnapshot(at time.Time, pod string) *Snapshot {
	d := &Device{Vendor: "nvidia", Index: "3", UUID: "GPU-3", Model: "H100", Up: true}
	if pod != "" {
		d.Claims = []attribution.Claim{{Share: 1, Owner: attribution.Owner{Kind: attribution.Kubernetes, Namespace: "ml", Pod: pod, Container: "c"}}}
	}
	return &Snapshot{Time: at, Devices: []*Device{d}}
}

func collectText(t *testing.T, r *eventRecorder) string {
	t.Helper()
	var b strings.Builder
	for _, m := range emitted(r.collect) {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		var ls []string
		for _, l := range pb.GetLabel() {
			ls = append(ls, l.GetName()+"="+strconv.Quote(l.GetValue()))
		}
		v := pb.GetGauge().GetValue() + pb.GetCounter().GetValue()
		fmt.Fprintf(&b, "%s{%s} %g\n", regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(m.Desc().String())[1], strings.Join(ls, ","), v)
	}
	return b.String()
}

func TestXidKeepsTheOwnerAtEventTime(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	r := newEventRecorder(nil, func() time.Time { return now })
	owner := "train-0"
	snapshots := 0
	snapshot := func(context.Context) *Snapshot { snapshots++; return podSnapshot(now, owner) }

	r.record(context.Background(), nvidia.Event{Index: 3, UUID: "GPU-3", Type: "xid", XID: 79, GPUInstance: -1}, snapshot)
	r.record(context.Background(), nvidia.Event{Index: 3, UUID: "GPU-3", Type: "xid", XID: 79, GPUInstance: -1}, snapshot)
	if snapshots != 1 {
		t.Errorf("two events within %v took %d snapshots, want 1", ownerFreshness, snapshots)
	}
	// The pod is replaced; the next event belongs to the new one, and the
	// old counter keeps its pod.
	now = now.Add(time.Minute)
	owner = "train-1"
	r.record(context.Background(), nvidia.Event{Index: 3, UUID: "GPU-3", Type: "xid", XID: 79, GPUInstance: -1}, snapshot)
	out := collectText(t, r)
	xidCounts(t, out, map[string]int{"train-0": 2, "train-1": 1})
}

// TestXidCountersCarryTheirStart: the exporter counts Xids itself, from 0
// when a series is made, so each series says when: its created timestamp,
// which the OTLP bridge makes its points' start. Without one a series was
// pushed as a stream of unknown start, its first point zero-duration, and
// a cumulative consumer saw no increase for the Xid that made it (found
// by probing: probe13-otlpscrape D3).
func TestXidCountersCarryTheirStart(t *testing.T) {
	made := time.Unix(1_700_000_000, 0)
	now := made
	r := newEventRecorder(nil, func() time.Time { return now })
	snapshot := func(context.Context) *Snapshot { return podSnapshot(now, "train-0") }
	r.record(context.Background(), nvidia.Event{Index: 3, UUID: "GPU-3", Type: "xid", XID: 79, GPUInstance: -1}, snapshot)
	now = now.Add(time.Minute)
	r.record(context.Background(), nvidia.Event{Index: 3, UUID: "GPU-3", Type: "xid", XID: 79, GPUInstance: -1}, snapshot)
	n := 0
	for _, m := range emitted(r.collect) {
		var pb dto.Metric
		if err := m.Write(&pb); err != nil {
			t.Fatal(err)
		}
		if pb.Counter == nil {
			continue
		}
		n++
		if got := pb.GetCounter().GetCreatedTimestamp(); got == nil || !got.AsTime().Equal(made) || pb.GetCounter().GetValue() != 2 {
			t.Errorf("xid counter %v, created %v; want 2, created at the first event, %v", pb.GetCounter().GetValue(), got, made)
		}
	}
	if n != 1 {
		t.Errorf("%d counters, want the one Xid series", n)
	}
}

// xidCounts checks xpu_xid_errors_total for Xid 79 on GPU 3 by pod.
func xidCounts(t *testing.T, out string, want map[string]int) {
	t.Helper()
	for pod, n := range want {
		line := fmt.Sprintf(`xpu_xid_errors_total{container="c",gpu="3",model="H100",namespace="ml",pod=%q,uuid="GPU-3",vendor="nvidia",xid="79"} %d`, pod, n)
		if !strings.Contains(out, line+"\n") {
			t.Errorf("missing %s in:\n%s", line, out)
		}
	}
}

// TestXidAfterAQuickReplacement: a pod replaced a second before an event
// is not its owner. A snapshot up to 2 s old named the owners, so an Xid
// 1.5 s after the snapshot was counted for the pod replaced since (found
// by probing, with pods churning every 5 s).
func TestXidAfterAQuickReplacement(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	r := newEventRecorder(nil, func() time.Time { return now })
	owner := "train-0"
	snapshot := func(context.Context) *Snapshot { return podSnapshot(now, owner) }
	ev := nvidia.Event{Index: 3, UUID: "GPU-3", Type: "xid", XID: 79, GPUInstance: -1}
	r.record(context.Background(), ev, snapshot)
	// Replaced half a second later; the next Xid a second after that.
	now, owner = now.Add(1500*time.Millisecond), "train-1"
	r.record(context.Background(), ev, snapshot)
	out := collectText(t, r)
	xidCounts(t, out, map[string]int{"train-0": 1, "train-1": 1})
}

func TestXidFloodIsBounded(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	r := newEventRecorder(nil, func() time.Time { return now })
	for i := range maxEventSeries + 5000 {
		now = now.Add(3 * time.Second) // every event sees a new snapshot and a new pod
		pod := fmt.Sprintf("churn-%d", i)
		r.record(context.Background(), nvidia.Event{Index: 3, UUID: "GPU-3", Type: "xid", XID: 13, GPUInstance: -1},
			func(context.Context) *Snapshot { return podSnapshot(now, pod) })
	}
	if n := len(r.xids); n > maxEventSeries {
		t.Errorf("%d xid series kept, the cap is %d", n, maxEventSeries)
	}
	if len(r.last) != 1 {
		t.Errorf("%d last-event series for one device and type, want 1", len(r.last))
	}
	// Past the retention everything goes.
	now = now.Add(eventRetention + time.Minute)
	r.record(context.Background(), nvidia.Event{Index: 3, UUID: "GPU-3", Type: "xid", XID: 13, GPUInstance: -1},
		func(context.Context) *Snapshot { return podSnapshot(now, "") })
	if len(r.xids) != 1 {
		t.Errorf("%d xid series after the retention, want only the newest", len(r.xids))
	}
}

// The demo driver raises an Xid on GPU 3, which a pod owns: the listener,
// started as the exporter starts, counts it with that pod.
func TestXidEventsEndToEnd(t *testing.T) {
	// The default scenario, with its Xid every second instead of every 20
	// minutes.
	y, err := os.ReadFile("../demo/default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	head, _, ok := strings.Cut(string(y), "\nevents:\n")
	if !ok {
		t.Fatal("demo/default.yaml has no events section at its end")
	}
	s, err := demo.Parse([]byte(head + "\nevents:\n  - {device: 3, xid: 31, every: 1s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	e := newAttributedExporterFor(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.Start(ctx)
	out := scrapeUntilXid(t, e)
	sample(t, out, "xpu_xid_errors_total", `xid="31"`, `pod="embeddings-0"`, `gpu="3"`)
	sample(t, out, "xpu_device_last_event_timestamp_seconds", `gpu="3"`, `type="xid"`)
	if !strings.Contains(out, "xpu_nvml_events_listening 1\n") {
		t.Error("the listener does not say it is listening")
	}
}

// TestFindEventDeviceByComputeInstance: GPU 3 in MIG mode. GPU instance 1
// is split into compute instances 0 (MIG-a, pod a) and 1 (MIG-b, pod b);
// GPU instance 2 is one compute instance, 0 (MIG-c, pod c).
func TestFindEventDeviceByComputeInstance(t *testing.T) {
	owner := func(pod string) []attribution.Claim {
		return []attribution.Claim{{Share: 1, Owner: attribution.Owner{Kind: attribution.Kubernetes, Namespace: "ml", Pod: pod, Container: "c"}}}
	}
	mig := func(uuid, pod, gi string, ci int) *Device {
		return &Device{Vendor: "nvidia", Index: "3", UUID: uuid, Up: true, Claims: owner(pod),
			MIG: &MIGInstance{ParentUUID: "GPU-3", Instance: gi, ComputeInstance: ci}}
	}
	parent := &Device{Vendor: "nvidia", Index: "3", UUID: "GPU-3", Up: true, HasMIG: true}
	snap := &Snapshot{Devices: []*Device{parent, mig("MIG-a", "a", "1", 0), mig("MIG-b", "b", "1", 1), mig("MIG-c", "c", "2", 0)}}
	for _, tc := range []struct {
		name   string
		gi, ci int
		want   string
	}{
		{"compute instance 1 of GPU instance 1", 1, 1, "MIG-b"},
		{"compute instance 0 of GPU instance 1", 1, 0, "MIG-a"},
		// Both pods' instances share it: charged to neither alone.
		{"GPU instance 1 as a whole", 1, -1, "GPU-3"},
		{"GPU instance 2 as a whole, its one compute instance", 2, -1, "MIG-c"},
		{"compute instance 0 of GPU instance 2", 2, 0, "MIG-c"},
		// Reconfigured since the snapshot: not guessed.
		{"a compute instance the snapshot does not have", 2, 5, "GPU-3"},
		{"not about a MIG instance", -1, -1, "GPU-3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := findEventDevice(snap, nvidia.Event{Index: 3, UUID: "GPU-3", Type: "xid", XID: 43, GPUInstance: tc.gi, ComputeInstance: tc.ci})
			if d == nil || d.UUID != tc.want {
				t.Errorf("event of GPU instance %d, compute instance %d found %v, want %s", tc.gi, tc.ci, d, tc.want)
			}
		})
	}
}

// TestXidOfAComputeInstanceEndToEnd: the simulated driver raises an Xid
// about compute instance 1 of GPU instance 1, which b.service's process
// runs in; compute instance 0 of the same GPU instance is a.service's. The
// counter carries b.service, never a.service.
func TestXidOfAComputeInstanceEndToEnd(t *testing.T) {
	s, err := demo.Parse([]byte(`node: mig-xid
devices:
  - model: NVIDIA A100-SXM4-80GB
    memory_total: 80GiB
    mig:
      - {profile: 1c.3g.40gb, gpu_instance: 1, compute_instance: 0, memory_used: 10GiB, processes: [{pid: 7001, unit: a.service, memory_used: 8GiB}]}
      - {profile: 2c.3g.40gb, gpu_instance: 1, compute_instance: 1, memory_used: 10GiB, processes: [{pid: 7002, unit: b.service, memory_used: 8GiB}]}
events:
  - {device: 0, xid: 43, every: 1s, gpu_instance: 1, compute_instance: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	e := newAttributedExporterFor(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.Start(ctx)
	out := scrapeUntilXid(t, e)
	sample(t, out, "xpu_xid_errors_total", `xid="43"`, `unit="b.service"`, `mig_instance="1"`)
	if regexp.MustCompile(`xpu_xid_errors_total\{[^}]*unit="a.service"`).MatchString(out) {
		t.Error("the Xid of b.service's compute instance is counted for a.service")
	}
}

func TestEventInstanceValidation(t *testing.T) {
	base := "devices:\n  - {model: NVIDIA A100-SXM4-80GB, memory_total: 80GiB, mig: [{profile: 1c.3g.40gb, gpu_instance: 1, compute_instance: 0}, {profile: 2c.3g.40gb, gpu_instance: 1, compute_instance: 1}]}\nevents:\n"
	for ev, want := range map[string]string{
		"  - {device: 0, xid: 43, gpu_instance: 1, compute_instance: 2}\n": "gpu_instance 1, compute_instance 2: device 0 has no such MIG instance",
		"  - {device: 0, xid: 43, gpu_instance: 3}\n":                      "gpu_instance 3: device 0 has no such MIG instance",
		"  - {device: 0, xid: 43, compute_instance: 1}\n":                  "compute_instance: needs the gpu_instance it is in",
		"  - {device: 0, type: single_bit_ecc, gpu_instance: 1}\n":         "NVML names MIG instances on Xid events only",
		"  - {device: 0, xid: 43, gpu_instance: 1, compute_instance: 1}\n": "",
	} {
		_, err := demo.Parse([]byte(base + ev))
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", ev, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: error %v, want %q", ev, err, want)
		}
	}
}

// scrapeUntilXid scrapes e until an Xid has been counted, for at most 10 s,
// and returns the last scrape.
func scrapeUntilXid(t *testing.T, e *Exporter) string {
	t.Helper()
	var out string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		out = scrapeText(t, e, 5*time.Second)
		if strings.Contains(out, "xpu_xid_errors_total{") {
			break
		}
	}
	return out
}

// TestEventsOfOtherGPUsAfterOneIsLost: GPU 1 falls off the bus 1 s in.
// nvmlEventSetWait then fails with GPU_IS_LOST while GPU 1 is in the set
// (nvml.h, nvmlEventSetWait_v2), so the Xids GPU 0 raises every second
// from 4 s on are never delivered by that set. The listener gives the set
// up, says so once, makes it anew without GPU 1 and counts them. Before,
// it waited on the old set for ever, still saying it was listening.
func TestEventsOfOtherGPUsAfterOneIsLost(t *testing.T) {
	defer func(r time.Duration) { waitRetry = r }(waitRetry)
	waitRetry = 100 * time.Millisecond
	s, err := demo.Parse([]byte(`node: lost-events
defaults: {model: NVIDIA H100 80GB HBM3, memory_total: 80GiB, metrics: {temperature: 50}}
devices:
  - {}
  - {faults: {lost_after: 1s}}
events:
  - {device: 0, xid: 31, at: 4s, every: 1s}
`))
	if err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	start := time.Now()
	e := newExporterOf(t, Config{NVML: s.NVML(start, time.Now), Now: time.Now, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, "nvidia")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.Start(ctx)
	var out string
	for deadline := start.Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		out = scrapeText(t, e, 5*time.Second)
		if strings.Contains(out, "xpu_xid_errors_total{") {
			break
		}
	}
	sample(t, out, "xpu_xid_errors_total", `gpu="0"`, `xid="31"`)
	sample(t, out, "xpu_device_up", `gpu="1"`) // still served, as down
	if !strings.Contains(out, "xpu_nvml_events_listening 1\n") {
		t.Error("the listener does not say it is listening again")
	}
	got := logs.String()
	for _, want := range []string{
		`msg="not receiving NVIDIA driver events (Xid errors are not counted)" err="wait for NVML events: ERROR_GPU_IS_LOST"`,
		`msg="some NVIDIA devices are lost and are not listened to for driver events; the others are" listening=1 lost=1`,
		`msg="receiving NVIDIA driver events again"`,
	} {
		if strings.Count(got, want) != 1 {
			t.Errorf("log has %d lines with %s, want 1:\n%s", strings.Count(got, want), want, got)
		}
	}
}

// TestUnnamedEventTakesNoDevice: a GPU lost before it was identified has
// no UUID; an event NVML could not name has none either, and must not be
// charged to that GPU and its owners (probe3 D1).
func TestUnnamedEventTakesNoDevice(t *testing.T) {
	lost := &Device{Vendor: "nvidia", Index: "1", Up: false}
	snap := &Snapshot{Devices: []*Device{{Vendor: "nvidia", Index: "0", UUID: "GPU-0", Up: true}, lost}}
	if d := findEventDevice(snap, nvidia.Event{Index: -1, Type: "xid", XID: 79, GPUInstance: -1, ComputeInstance: -1}); d != nil {
		t.Errorf("an unnamed event was charged to GPU %s", d.Index)
	}
}

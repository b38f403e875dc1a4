package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/xpu-exporter/xpu_exporter/attribution"
	"github.com/xpu-exporter/xpu_exporter/collector"
)

// Owner names come from outside (Slurm job names, pod labels): the page
// must escape them.
func TestDevicesPageEscapesOwners(t *testing.T) {
	util := 0.5
	snap := &collector.Snapshot{
		Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Devices: []*collector.Device{{
			Vendor: "nvidia", Index: "0", UUID: "GPU-1", Model: "H100", Up: true, Utilization: &util,
			Claims: []attribution.Claim{{Share: 1, Owner: attribution.Owner{
				Kind: attribution.Slurm, SlurmJobID: "7", SlurmUser: `<script>alert("x")</script>`,
			}}},
		}},
	}
	h := &devicesHandler{node: `node"><b>`}
	var buf bytes.Buffer
	if err := devicesTemplate.Execute(&buf, h.view(snap)); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	for _, raw := range []string{"<script>alert", `node"><b>`} {
		if strings.Contains(page, raw) {
			t.Errorf("page contains unescaped %q", raw)
		}
	}
	for _, escaped := range []string{"&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;", "slurm_job_id=<b><bdi>7</bdi></b>", "50.0%"} {
		if !strings.Contains(page, escaped) {
			t.Errorf("page lacks %q:\n%s", escaped, page)
		}
	}
}

// TestDevicesPageIsolatesOwnerText: a right-to-left override in a process
// name reversed the rest of its row in a browser, the exporter's figures
// included, and invalid bytes went out raw in a page declared UTF-8 (found
// by probing). Each value is isolated in <bdi> and valid UTF-8, its
// invalid bytes U+FFFD as everywhere else.
func TestDevicesPageIsolatesOwnerText(t *testing.T) {
	util := 0.3
	snap := &collector.Snapshot{
		Devices: []*collector.Device{{
			Vendor: "nvidia", Index: "0", UUID: "GPU-1", Model: "H100\xff", Up: true, Utilization: &util,
			Claims: []attribution.Claim{{Share: 1, Owner: attribution.Owner{
				Kind: attribution.Process, Unit: "y.service", User: "carol", Command: "\u202Egnp.exe\xfe",
			}}},
		}},
	}
	var buf bytes.Buffer
	if err := devicesTemplate.Execute(&buf, (&devicesHandler{}).view(snap)); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	if !utf8.ValidString(page) {
		t.Error("the page is not valid UTF-8")
	}
	for _, want := range []string{"command=<b><bdi>\u202Egnp.exe\uFFFD</bdi></b>", "<bdi>H100\uFFFD</bdi>"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
}

// A device whose owners may be missing says so, on the page and in JSON,
// rather than "no owner"; and where some are seen, that others may hold it,
// as the JSON's owners_unknown does, rather than show the one seen as its
// only owner (probe B PB2: a time-slicing replica the device plugin no
// longer advertises, held by one pod).
func TestDevicesOwnersUnknown(t *testing.T) {
	seen := []attribution.Claim{{Owner: attribution.Owner{Kind: attribution.Kubernetes, Namespace: "ml", Pod: "ts-x", Container: "main"}}}
	snap := &collector.Snapshot{Devices: []*collector.Device{
		{Vendor: "habana", Index: "6", UUID: "G-6", Up: true, OwnersUnknown: true},
		{Vendor: "habana", Index: "7", UUID: "G-7", Up: true},
		{Vendor: "nvidia", Index: "1", UUID: "GPU-1", Up: true, OwnersUnknown: true, Claims: seen},
		{Vendor: "nvidia", Index: "2", UUID: "GPU-2", Up: true, Claims: seen},
	}}
	view := (&devicesHandler{}).view(snap)
	for i, want := range []bool{true, false, true, false} {
		if view.Devices[i].OwnersUnknown != want {
			t.Errorf("device %d: owners unknown %v, want %v", i, view.Devices[i].OwnersUnknown, want)
		}
	}
	var buf bytes.Buffer
	if err := devicesTemplate.Execute(&buf, view); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	for s, want := range map[string]int{">owners unknown": 1, ">other owners unknown": 1, "no owner": 1, "pod=<b><bdi>ts-x": 2} {
		if n := strings.Count(page, s); n != want {
			t.Errorf("%q %d times on the page, want %d:\n%s", s, n, want, page)
		}
	}
}

// The page links the metrics where --web.telemetry-path serves them, as the
// landing page does: /metrics answers 404 under another path.
func TestDevicesPageLinksTelemetryPath(t *testing.T) {
	for _, path := range []string{"/metrics", "/custom/metrics"} {
		h := &devicesHandler{metricsPath: path}
		var buf bytes.Buffer
		if err := devicesTemplate.Execute(&buf, h.view(&collector.Snapshot{})); err != nil {
			t.Fatal(err)
		}
		if want := `href="` + path + `"`; !strings.Contains(buf.String(), want) {
			t.Errorf("--web.telemetry-path=%s: page lacks %s:\n%s", path, want, buf.String())
		}
	}
}

// The unattributed part of a device is listed as /metrics serves it: with
// its figures, and not at all where it has none (probe I, PI7: an empty
// "unattributed" entry on a Gaudi whose owners were unknown). GPU 3's
// stray process uses 2 GiB, listed; Gaudi 1's has no figure.
func TestDevicesUnattributedAsServed(t *testing.T) {
	mem := uint64(2 << 30)
	snap := &collector.Snapshot{Devices: []*collector.Device{
		{Vendor: "habana", Index: "1", UUID: "G-1", Up: true, OwnersUnknown: true,
			Processes: []collector.Process{{PID: 7}}, ProcessOwner: map[uint32]int{7: attribution.Unattributed}},
		{Vendor: "nvidia", Index: "3", UUID: "GPU-3", Up: true,
			Processes: []collector.Process{{PID: 8, MemoryUsed: &mem}}, ProcessOwner: map[uint32]int{8: attribution.Unattributed}},
	}}
	view := (&devicesHandler{}).view(snap)
	if o := view.Devices[0].Owners; len(o) != 0 {
		t.Errorf("Gaudi 1: owners %+v, want none", o)
	}
	if o := view.Devices[1].Owners; len(o) != 1 || o[0].Kind != "unattributed" || o[0].MemoryUsed == nil || *o[0].MemoryUsed != float64(mem) {
		t.Errorf("GPU 3: owners %+v, want the unattributed 2 GiB", o)
	}
}

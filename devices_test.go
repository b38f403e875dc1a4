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
// rather than "no owner".
func TestDevicesOwnersUnknown(t *testing.T) {
	snap := &collector.Snapshot{Devices: []*collector.Device{
		{Vendor: "habana", Index: "6", UUID: "G-6", Up: true, OwnersUnknown: true},
		{Vendor: "habana", Index: "7", UUID: "G-7", Up: true},
	}}
	view := (&devicesHandler{}).view(snap)
	if !view.Devices[0].OwnersUnknown || view.Devices[1].OwnersUnknown {
		t.Errorf("owners unknown: %v, %v; want true, false", view.Devices[0].OwnersUnknown, view.Devices[1].OwnersUnknown)
	}
	var buf bytes.Buffer
	if err := devicesTemplate.Execute(&buf, view); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), "owners unknown"); n != 1 || strings.Count(buf.String(), "no owner") != 1 {
		t.Errorf("%d devices with owners unknown on the page, want 1:\n%s", n, buf.String())
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

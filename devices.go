package main

import (
	"context"
	"encoding/json"
	"html/template"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/xpu-exporter/xpu_exporter/collector"
	"github.com/xpu-exporter/xpu_exporter/internal/validutf8"
)

// devicesHandler serves /devices: every device of the node with its owners,
// from the same snapshot as /metrics, as HTML or (?format=json) JSON. It
// answers "which pod is on gpu3?" without a Prometheus query.
type devicesHandler struct {
	exporter *collector.Exporter
	node     string
	demo     bool
	timeout  time.Duration
	logger   *slog.Logger
	// metricsPath is --web.telemetry-path, which the page links.
	metricsPath string
	// stopping ends at shutdown once requests under way have had their
	// grace: a request still waiting then answers with what it has, as a
	// scrape does, rather than being cut off when the exporter exits.
	stopping context.Context
}

type devicesPage struct {
	Node    string       `json:"node"`
	Time    time.Time    `json:"time"`
	Demo    bool         `json:"demo"`
	Devices []deviceView `json:"devices"`
	Sources []sourceView `json:"attribution_sources"`
	// MetricsPath is for the HTML page's link only.
	MetricsPath string `json:"-"`
}

type deviceView struct {
	Vendor      string      `json:"vendor"`
	GPU         string      `json:"gpu"`
	UUID        string      `json:"uuid,omitempty"`
	Model       string      `json:"model,omitempty"`
	MIG         *migView    `json:"mig,omitempty"`
	Up          bool        `json:"up"`
	Utilization *float64    `json:"utilization,omitempty"`
	MemoryUsed  *float64    `json:"memory_used_bytes,omitempty"`
	MemoryTotal *float64    `json:"memory_total_bytes,omitempty"`
	Owners      []ownerView `json:"owners"`
	// OwnersUnknown: Owners may lack some (Device.OwnersUnknown).
	OwnersUnknown bool `json:"owners_unknown,omitempty"`
}

type migView struct {
	ParentUUID string `json:"parent_uuid"`
	Profile    string `json:"profile"`
	Instance   string `json:"instance"`
}

type ownerView struct {
	// Kind is kubernetes, slurm, process or unattributed.
	Kind        string            `json:"kind"`
	Labels      map[string]string `json:"labels"`
	Share       *float64          `json:"allocated_share,omitempty"`
	Utilization *float64          `json:"utilization,omitempty"`
	MemoryUsed  *float64          `json:"memory_used_bytes,omitempty"`
}

type sourceView struct {
	Name  string `json:"name"`
	Up    bool   `json:"up"`
	Error string `json:"error,omitempty"`
}

func (h *devicesHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !readOnly(w, r) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.timeout)
	defer cancel()
	if h.stopping != nil {
		defer context.AfterFunc(h.stopping, cancel)()
	}
	snap := h.exporter.Snapshot(ctx)
	if snap == nil {
		http.Error(w, "the node did not answer in time", http.StatusServiceUnavailable)
		return
	}
	page := h.view(snap)
	if r.URL.Query().Get("format") == "json" {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(page); err != nil {
			h.logger.Debug("writing /devices", "err", err)
		}
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := devicesTemplate.Execute(w, page); err != nil {
		h.logger.Debug("writing /devices", "err", err)
	}
}

func (h *devicesHandler) view(snap *collector.Snapshot) devicesPage {
	page := devicesPage{Node: h.node, Time: snap.Time.UTC(), Demo: h.demo, Devices: []deviceView{}, Sources: []sourceView{}, MetricsPath: h.metricsPath}
	for _, s := range snap.Attribution {
		sv := sourceView{Name: s.Name, Up: s.Err == nil}
		if s.Err != nil {
			sv.Error = s.Err.Error()
		}
		page.Sources = append(page.Sources, sv)
	}
	for _, d := range snap.Devices {
		dv := deviceView{
			Vendor: d.Vendor, GPU: d.Index, UUID: d.UUID, Model: d.Model, Up: d.Up,
			Utilization: d.Utilization, MemoryUsed: d.MemoryUsed, MemoryTotal: d.MemoryTotal,
			Owners: []ownerView{}, OwnersUnknown: d.OwnersUnknown,
		}
		if d.MIG != nil {
			dv.MIG = &migView{ParentUUID: d.MIG.ParentUUID, Profile: d.MIG.Profile, Instance: d.MIG.Instance}
		}
		usage := d.Usage()
		for i, c := range d.Claims {
			names, values := c.Owner.Labels()
			ov := ownerView{Kind: string(c.Owner.Kind), Labels: map[string]string{}}
			for j := range names {
				ov.Labels[names[j]] = values[j]
			}
			if v, ok := d.AllocatedDevices(c); ok {
				ov.Share = &v
			}
			if i < len(usage) {
				ov.Utilization, ov.MemoryUsed = usage[i].Utilization, usage[i].MemoryUsed
			}
			dv.Owners = append(dv.Owners, ov)
		}
		// The unattributed part as /metrics serves it: where it has a
		// figure (probe I, PI7: an empty entry on a device whose owners
		// are unknown, which no series stood for).
		if len(usage) > len(d.Claims) {
			if u := usage[len(d.Claims)]; u.Utilization != nil || u.MemoryUsed != nil {
				dv.Owners = append(dv.Owners, ownerView{Kind: "unattributed", Labels: map[string]string{}, Utilization: u.Utilization, MemoryUsed: u.MemoryUsed})
			}
		}
		page.Devices = append(page.Devices, dv)
	}
	return page
}

// devicesTemplate is html/template: owner names come from pods and jobs,
// outside input, and are escaped. Each is also made valid UTF-8 as it is
// served everywhere ("text"), and isolated in <bdi>: a right-to-left
// override in a process name reversed the rest of its row, the exporter's
// figures included ("util 30.0%" read "%0.03 litu").
var devicesTemplate = template.Must(template.New("devices").Funcs(template.FuncMap{
	"text": validutf8.String,
	"pct": func(v *float64) string {
		if v == nil {
			return "–"
		}
		return formatFloat(*v*100, 1) + "%"
	},
	"gib": func(v *float64) string {
		if v == nil {
			return "–"
		}
		return formatFloat(*v/(1<<30), 1) + " GiB"
	},
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Devices on {{.Node}} — xpu_exporter</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;width:100%}
th,td{border-bottom:1px solid #ddd;padding:.35em .6em;text-align:left;vertical-align:top;font-size:14px}
th{background:#f3f3f3}
.down{color:#b00020;font-weight:bold}
.demo{background:#fff3cd;padding:.5em;border:1px solid #e0c060}
.owner{margin:.1em 0 .3em}
.kind{color:#666;font-size:12px}
code{font-size:11px;word-break:break-all}
</style></head><body>
<h1>Devices on {{.Node}}</h1>
{{if .Demo}}<p class="demo">DEMO MODE: a simulated node, not real hardware.</p>{{end}}
<p>Snapshot taken {{.Time.Format "2006-01-02 15:04:05 MST"}}. <a href="?format=json">JSON</a> · <a href="{{.MetricsPath}}">metrics</a></p>
<table>
<thead><tr><th>GPU</th><th>Model</th><th>UUID</th><th>State</th><th>Utilization</th><th>Memory</th><th>Owners (allocated share · utilization · memory)</th></tr></thead>
<tbody>
{{range .Devices}}<tr>
<td>{{.Vendor}} {{.GPU}}{{with .MIG}}<br><span class="kind">MIG {{.Profile}} #{{.Instance}}</span>{{end}}</td>
<td><bdi>{{text .Model}}</bdi></td>
<td><code>{{.UUID}}</code></td>
<td>{{if .Up}}up{{else}}<span class="down">DOWN</span>{{end}}</td>
<td>{{pct .Utilization}}</td>
<td>{{gib .MemoryUsed}} / {{gib .MemoryTotal}}</td>
<td>{{range .Owners}}<div class="owner"><span class="kind">{{.Kind}}</span>
{{- range $k, $v := .Labels}} {{$k}}=<b><bdi>{{text $v}}</bdi></b>{{end}}
{{- with .Share}} · share {{pct .}}{{end}} · util {{pct .Utilization}} · mem {{gib .MemoryUsed}}</div>
{{end}}{{if .OwnersUnknown}}<span class="kind">{{if .Owners}}other {{end}}owners unknown (README: xpu_device_owners)</span>{{else if not .Owners}}<span class="kind">no owner</span>{{end}}</td>
</tr>
{{end}}</tbody></table>
{{with .Sources}}<h2>Attribution sources</h2><ul>
{{range .}}<li>{{.Name}}: {{if .Up}}up{{else}}<span class="down">down</span> — <bdi>{{text .Error}}</bdi>{{end}}</li>
{{end}}</ul>{{end}}
</body></html>
`))

func formatFloat(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }

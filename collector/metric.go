package collector

import (
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/xpu-exporter/xpu_exporter/attribution"
)

// metric is one family: its name, help and type are fixed; its label names
// vary from device to device (MIG and owner labels), so descriptors are made
// per label set and cached.
type metric struct {
	name string
	help string
	typ  prometheus.ValueType
}

func gauge(name, help string) metric {
	return metric{name: namespace + "_" + name, help: help, typ: prometheus.GaugeValue}
}

func counter(name, help string) metric {
	return metric{name: namespace + "_" + name, help: help, typ: prometheus.CounterValue}
}

var descs sync.Map // name + label names → *prometheus.Desc

func (m metric) desc(labelNames []string) *prometheus.Desc {
	key := m.name + "\xff" + strings.Join(labelNames, "\xff")
	if d, ok := descs.Load(key); ok {
		return d.(*prometheus.Desc)
	}
	d, _ := descs.LoadOrStore(key, prometheus.NewDesc(m.name, m.help, labelNames, nil))
	return d.(*prometheus.Desc)
}

// labels is a label set under construction.
type labels struct {
	names  []string
	values []string
}

func (l labels) with(name, value string) labels {
	return labels{
		names:  append(l.names[:len(l.names):len(l.names)], name),
		values: append(l.values[:len(l.values):len(l.values)], value),
	}
}

// emitter sends metrics for one scrape.
type emitter struct {
	ch chan<- prometheus.Metric
}

func (e emitter) emit(m metric, l labels, v float64) {
	e.ch <- prometheus.MustNewConstMetric(m.desc(l.names), m.typ, v, l.values...)
}

// deviceLabels are the labels of every device series: the device's identity
// and, when it has exactly one owner, the owner's labels.
func deviceLabels(d *Device) labels {
	l := identityLabels(d)
	if o, ok := d.owner(); ok {
		l = l.withOwner(o)
	}
	return l
}

func (l labels) withOwner(o attribution.Owner) labels {
	names, values := o.Labels()
	return labels{
		names:  append(l.names[:len(l.names):len(l.names)], names...),
		values: append(l.values[:len(l.values):len(l.values)], values...),
	}
}

// identityLabels identify a device: gpu, uuid, vendor, model, and for MIG
// instances their parent, profile and instance.
//
// A device that stopped answering before it was ever identified has only
// gpu and vendor: an empty uuid or model would be a made-up value.
func identityLabels(d *Device) labels {
	l := labels{names: []string{"gpu"}, values: []string{d.Index}}
	if d.UUID != "" {
		l = l.with("uuid", d.UUID)
	}
	l = l.with("vendor", d.Vendor)
	if d.Model != "" {
		l = l.with("model", d.Model)
	}
	if d.MIG != nil {
		l.names = append(l.names, "parent_uuid", "mig_profile", "mig_instance")
		l.values = append(l.values, d.MIG.ParentUUID, d.MIG.Profile, d.MIG.Instance)
	}
	return l
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// sortDevices orders devices by vendor and numeric index, each whole GPU
// before its MIG instances, so that output and /devices are stable.
func sortDevices(devs []*Device) {
	sort.SliceStable(devs, func(i, j int) bool {
		a, b := devs[i], devs[j]
		if a.Vendor != b.Vendor {
			return a.Vendor < b.Vendor
		}
		if ai, bi := atoi(a.Index), atoi(b.Index); ai != bi {
			return ai < bi
		}
		if (a.MIG == nil) != (b.MIG == nil) {
			return a.MIG == nil
		}
		if a.MIG != nil && a.MIG.Instance != b.MIG.Instance {
			return atoi(a.MIG.Instance) < atoi(b.MIG.Instance)
		}
		return a.UUID < b.UUID
	})
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}

package collector

import "github.com/xpu-exporter/xpu_exporter/vendors/amd"

// xgmiLinks is one direction of a GPU's XGMI data counters across reads,
// which xpu_amd_xgmi_data_bytes_total serves as one counter summed over the
// links. gpu_metrics gives each link its own accumulator
// (kgd_pp_interface.h, gpu_metrics_v1_4 to v1_8: "XGMI accumulated data
// transfer size(KiloBytes)"); a link the firmware does not report in a read
// is all-ones (smu_cmn_init_soft_gpu_metrics fills the table with 0xFF
// before the SMU code sets the links it maps), and it may map a link in one
// read and not the next. A sum over the links of each read alone fell when
// one went unreported, and Prometheus read the fall as a reset worth the
// whole sum.
type xgmiLinks struct {
	// last is each link's last reported count, kept while it goes
	// unreported; base what a link had counted when it first appeared
	// after the first read, which this exporter did not see carried.
	last, base map[int]uint64
}

// sum takes one read's links and returns the counter to serve: the links
// reported now, and those reported before at their last count, each less
// its base. A link that counts less than before means the driver was
// reloaded (the accumulators start again): the counter starts again from
// this read's links, a reset Prometheus reads as one. ok is false when no
// link was ever reported.
func (x *xgmiLinks) sum(links []amd.Opt[uint64]) (total float64, ok bool) {
	reset := x.last == nil
	for i, v := range links {
		if last, seen := x.last[i]; v.OK && seen && v.Value < last {
			reset = true
		}
	}
	if reset {
		x.last, x.base = map[int]uint64{}, map[int]uint64{}
	}
	for i, v := range links {
		if !v.OK {
			continue
		}
		if _, seen := x.last[i]; !seen && !reset {
			x.base[i] = v.Value
		}
		x.last[i] = v.Value
	}
	for i, v := range x.last {
		total += float64(v - x.base[i])
	}
	return total, len(x.last) > 0
}

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
	// carried is what links counted before they started again.
	carried float64
}

// sum takes one read's links and returns the counter to serve: what the
// links carried since the first read, the links reported now and those
// reported before at their last count, each less its base. A link that
// counts less than before started again from 0 (a driver reload restarts
// them all): what it had counted is kept and it counts on from 0, so the
// counter never falls. Starting the whole sum again from that read's
// links instead gave, when one link restarted and a later one had not,
// the later link's count from before it appeared: a rise Prometheus took
// for traffic (probe G, PG1). ok is false when no link was ever reported.
func (x *xgmiLinks) sum(links []amd.Opt[uint64]) (total float64, ok bool) {
	first := x.last == nil
	if first {
		x.last, x.base = map[int]uint64{}, map[int]uint64{}
	}
	for i, v := range links {
		if !v.OK {
			continue
		}
		last, seen := x.last[i]
		switch {
		case seen && v.Value < last:
			x.carried += float64(last - x.base[i])
			x.base[i] = 0
		case !seen && !first:
			x.base[i] = v.Value
		}
		x.last[i] = v.Value
	}
	total = x.carried
	for i, v := range x.last {
		total += float64(v - x.base[i])
	}
	return total, len(x.last) > 0
}

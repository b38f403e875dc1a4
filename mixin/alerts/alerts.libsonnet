// The alerts on instant values keep firing for keepFiringFor after their
// condition stops holding: an exporter rollout or restart misses a scrape,
// which leaves every series of the node stale for an evaluation, and would
// resolve every such alert of the node and start each one's `for` again
// (probe14-alerts D3). Alerts on a range (increase, rate, avg_over_time)
// bridge the gap by themselves, and XpuExporterDown is the gap's own.
local bridged = [
  'XpuExporterDown',
  'XpuTemperatureHigh',  // util.heldOnDevice bridges a gap itself
  'XpuTemperatureCritical',
  'XpuEccUncorrectableErrors',
  'XpuXidErrors',
  'XpuClocksThrottled',
  'XpuInferenceTtftHigh',
  'XpuInferenceLatencyHigh',
  'XpuInferenceErrorRateHigh',
];

local util = import '../lib/util.libsonnet';

(import 'device.libsonnet') +
(import 'fleet.libsonnet') +
(import 'inference.libsonnet') +
{
  // keepFiringFor 0 keeps no alert firing: nothing to outlast.
  assert util.seconds($._config.keepFiringFor) == 0 || util.seconds($._config.keepFiringFor) > util.seconds($._config.exporterDownFor) :
         'keepFiringFor must be longer than exporterDownFor: the alerts of a node whose exporter is down would resolve before XpuExporterDown fires',
  prometheusAlerts+:: {
    groups: [
      g {
        rules: [
          if !std.objectHas(r, 'alert') || std.member(bridged, r.alert) then r else r { keep_firing_for: $._config.keepFiringFor }
          for r in g.rules
        ],
      }
      for g in super.groups
    ],
  },
}

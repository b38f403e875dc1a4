// The alerts on instant values keep firing for keepFiringFor after their
// condition stops holding: an exporter rollout or restart misses a scrape,
// which leaves every series of the node stale for an evaluation, and would
// resolve every such alert of the node and start each one's `for` again
// (probe14-alerts D3). Alerts on a range (increase, rate, avg_over_time)
// bridge the gap by themselves, and XpuExporterDown is the gap's own.
local bridged = [
  'XpuExporterDown',
  'XpuEccUncorrectableErrors',
  'XpuXidErrors',
  'XpuClocksThrottled',
  'XpuInferenceTtftHigh',
  'XpuInferenceLatencyHigh',
  'XpuInferenceErrorRateHigh',
];

(import 'device.libsonnet') +
(import 'fleet.libsonnet') +
(import 'inference.libsonnet') +
{
  prometheusAlerts+:: {
    groups: [
      g {
        rules: [
          if std.member(bridged, r.alert) then r else r { keep_firing_for: $._config.keepFiringFor }
          for r in g.rules
        ],
      }
      for g in super.groups
    ],
  },
}

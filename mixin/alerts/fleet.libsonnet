// Alerts on the fleet as a whole: capacity left idle, devices whose health
// score (rules/health.libsonnet) has dropped, and exporters that stopped
// reporting (which would otherwise resolve every device alert of a node).
local util = import '../lib/util.libsonnet';

{
  local c = $._config,
  local device = util.deviceText,
  local owner = util.ownerText,
  local target = util.labels(c.targetLabels),
  // An attribution fault must hold attributionDownFor in all, of which the
  // alert's `for` (exporterDownFor, which the arms that hide device alerts
  // need) is the last part: the rest is held within the expression, the
  // series' worst value over that range, of a series that was there at its
  // start: one that begins at fault (an exporter started on a rebooted node
  // whose kubelet is not answering yet) has nothing to hold over, and paged
  // after the `for` alone (review22 F1).
  local attributionExtra = util.seconds(c.attributionDownFor) - util.seconds(c.exporterDownFor),
  assert attributionExtra >= 0 : "attributionDownFor must not be shorter than exporterDownFor, the alert's `for`",
  local attributionHeld(overTime, series, cmp) =
    local range = if attributionExtra % 60 == 0 then '%dm' % (attributionExtra / 60) else '%ds' % attributionExtra;
    if attributionExtra == 0 then '%s %s' % [series, cmp]
    else '(%s(%s[%s]) %s and %s offset %s)' % [overTime, series, range, cmp, series, range],

  prometheusAlerts+:: {
    groups+: [{
      name: 'xpu-fleet',
      rules: [
        util.alert(c, {
          alert: 'XpuFleetIdleFractionHigh',
          // Counts allocated and free devices alike: both are capacity the
          // fleet pays for and nobody uses. Physical GPUs, each once
          // (util.gpuUtilization): an AMD GPU in compute partitions serves
          // a utilization of its own and one per partition, and a GPU in MIG
          // mode one per instance; counting those series would weigh one
          // GPU 1 + N times.
          expr: |||
            count by (%(clusterLabel)s) (
              (
            %(gpu)s
              ) < %(idleUtilizationThreshold)g
            )
              / count by (%(clusterLabel)s) (
            %(gpu)s
              )
              > %(fleetIdleFraction)g
          ||| % (c { gpu: util.indent(util.indent(util.gpuUtilization(c, c.xpuSelector, read=function(series) util.lastDeviceReading(c, series)))) }),
          'for': c.fleetIdleFor,
          labels: { severity: 'info' },
          annotations: {
            summary: 'A large part of the fleet is idle.',
            description: '{{ $value | humanizePercentage }} of the devices%s have been below %s utilization for %s.' % [util.clusterText(c), util.percent(c.idleUtilizationThreshold), c.fleetIdleFor],
          },
        }),
        util.alert(c, {
          alert: 'XpuDeviceHealthDegraded',
          // A GPU's MIG instances or partitions as unhealthy as it are
          // its one alert.
          // Its score read as lastReading: the record is not written at
          // an evaluation after a failed scrape.
          expr: util.withoutDeadExporters(c, util.withoutPartitionsOf(c,
                                                                      util.lastReading(c, 'device:xpu_health_score:clamp_min') + ' < %(healthScoreThreshold)g' % c,
                                                                      util.lastReading(c, 'device:xpu_health_score:clamp_min{parent_uuid="", uuid!=""}') + ' < %(healthScoreThreshold)g' % c)),
          'for': c.healthScoreFor,
          labels: { severity: 'warning' },
          annotations: {
            summary: 'A device health score is low.',
            description: '%s (owner: %s) has a health score of {{ printf "%%.2g" $value }}; the active inputs are in device:xpu_health_penalty:group.' % [device, owner],
          },
        }),
        util.alert(c, {
          alert: 'XpuExporterDown',
          // A target that fails its scrapes, or one that served devices
          // within the lookback and is no longer scraped at all (its pod is
          // gone, not rescheduled): either way every device alert of that
          // node has silently resolved. A node removed on purpose fires
          // until the lookback has passed; silence it.
          // Also an exporter that is scraped but whose device collector
          // fails (a broken driver: NVML does not initialise, so every
          // device series of the node is gone, up stays 1; a failing
          // hl-smi, whose Gaudis are reported down for want of a reading,
          // which XpuDeviceLost leaves to this alert); and an
          // attribution source that is down (the kubelet, the pod metadata,
          // Slurm: devices are served without the owners it gives, so
          // their GPU-hours go to nobody), or device-plugin IDs or Slurm
          // GRES indices the exporter cannot place
          // (xpu_attribution_unknown_device_ids: the devices they may
          // name have unknown owners; a job's GPU no GPU here is). One alert for all, as the mixin
          // keeps to its 17 alerts.
          // The first two arms keep the same labels, the target's and
          // node (which the chart sets on every series of a target): an
          // exporter that stops answering and whose pod is then deleted
          // (evicted, the node drained) is one alert that goes on firing,
          // not one resolved and another pending for the whole `for`
          // (probe14-alerts D1).
          // An attribution source is the node's (its kubelet, its
          // slurmd): down for several exporters of a node the chart runs
          // for two vendors, it is one alert for the node, not one per
          // exporter (probe21-alerts D6); down for one of them, that
          // exporter's, which it names (review21 F1).
          expr: |||
            max by (%(target)s, node) (up{%(xpuSelector)s} == 0)
            or (
              group by (%(target)s, node) (max_over_time(xpu_device_up{%(xpuSelector)s}[%(exporterGoneLookback)s]))
                unless on (%(target)s) up{%(xpuSelector)s}
            )
            or max by (%(target)s, collector) (xpu_scrape_collector_success{%(xpuSelector)s}) == 0
            or (
              max by (%(target)s, source) (%(sourceDown)s)
                unless on (%(scrape)s, source) (count by (%(scrape)s, source) (%(sourceDown)s) > 1)
            )
            or count by (%(scrape)s, source) (%(sourceDown)s) > 1
            or label_replace(max by (%(target)s) (%(unplaced)s), "attribution", "unknown_device_ids", "", "")
          ||| % (c {
                   target: target,
                   scrape: util.labels(std.filter(function(l) l != 'exporter', c.targetLabels)),
                   sourceDown: attributionHeld('max_over_time', 'xpu_attribution_source_up{%s}' % c.xpuSelector, '== 0'),
                   unplaced: attributionHeld('min_over_time', 'xpu_attribution_unknown_device_ids{%s}' % c.xpuSelector, '> 0'),
                 }),
          'for': c.exporterDownFor,
          labels: { severity: 'warning' },
          annotations: {
            summary: 'An exporter stopped reporting its devices or their owners.',
            description: 'The {{ with $labels.exporter }}{{ . }} {{ end }}exporter on {{ $labels.instance }}%s ' % util.clusterText(c)
                         + '{{ if $labels.collector }}has had its {{ $labels.collector }} collector failing for %s: the devices it reads are not reported, and no alert about them can fire.' % c.exporterDownFor
                         + '{{ else if $labels.source }}has had its {{ $labels.source }} attribution source down for %s: its devices are served without the owners that source gives (no GPU-hours or cost for them, alerts name no owner).' % c.attributionDownFor
                         + '{{ else if $labels.attribution }}has had device-plugin IDs or Slurm GRES indices it cannot place for %s (its log names them): a device an ID may name has unknown owners (no GPU-hours or cost for it; owners_unknown in the capacity split), and a job holding a GRES index no GPU of the node has is billed without that GPU.' % c.attributionDownFor
                         + '{{ else }}has not been scraped successfully for %s; no new alert about its devices can fire, and those firing resolve within minutes, their faults not known to have cleared.{{ end }}' % c.exporterDownFor,
          },
        }),
      ],
    }],
  },
}

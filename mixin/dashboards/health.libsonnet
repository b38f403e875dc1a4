// Health & reliability: the health score and the events behind it (XID,
// ECC, memory repairs, throttling, PCIe), each with the workload it hit.
local g = import '../lib/grafana.libsonnet';
local util = import '../lib/util.libsonnet';
local common = import 'common.libsonnet';

{
  local c = $._config,
  local d = common(c),
  local s = d.selector,
  local key = util.labels(c.deviceKeyLabels),
  // Device and owner columns for per-device tables.
  local device = util.labels([c.clusterLabel, 'node', 'gpu', 'uuid', 'model']),
  local deviceOwner = util.labels([c.clusterLabel, 'node', 'gpu', 'uuid', 'model'] + util.ownerLabels(c)),
  // Reasons that are not faults: an idle GPU or clocks set on purpose.
  local benignThrottle = 'gpu_idle|applications_clocks_setting|display_clocks_setting',

  grafanaDashboards+:: {
    'xpu-health.json': g.dashboard(
      c,
      'xpu-health',
      'Health & reliability',
      'Device health score, XID and ECC errors, memory repairs, throttling and PCIe link problems, with the workload each one hit.',
      d.variables,
      [
        g.row('Health'),
        g.stat('Devices down', 'Devices that stopped answering the driver, e.g. fell off the bus.', [
          g.target('count(xpu_device_up{%s} == 0) or vector(0)' % s, instant=true),
        ]) + g.size(6, 4),
        g.stat('Unhealthy devices', 'Devices with a health score below %g.' % c.healthScoreThreshold, [
          g.target('count(device:xpu_health:score{%s} < %g) or vector(0)' % [s, c.healthScoreThreshold], instant=true),
        ]) + g.size(6, 4),
        g.stat('Failing collectors', 'Exporter collectors whose last run failed or missed its deadline.', [
          g.target('count(xpu_scrape_collector_success{%s} == 0) or vector(0)' % d.nodeSelector, instant=true),
        ]) + g.size(6, 4),
        g.stat('Attribution sources down', 'Sources of owner information (kubelet, Slurm, procfs) the exporter cannot read: devices lose their owner labels.', [
          g.target('count(xpu_attribution_source_up{%s} == 0) or vector(0)' % d.nodeSelector, instant=true),
        ]) + g.size(6, 4),
        g.table('Lowest health scores', 'The ten devices with the lowest health score (1 is healthy, 0 is down); README.md explains the formula.', [
          g.target('bottomk(10, device:xpu_health:score{%s})' % s, instant=true),
        ], [{ name: 'Health score', unit: 'percentunit' }]),
        g.table('Active health inputs', 'What lowers each score, and by how much.', [
          g.target(|||
            device:xpu_health_penalty:weight{%(cluster)s}
              * on (%(key)s) group_left (node, gpu, model)
              group by (%(key)s, node, gpu, model) (xpu_device_up{%(s)s})
          ||| % { cluster: d.cluster, key: key, s: s }, instant=true),
        ], [{ name: 'Penalty', unit: 'short' }]),

        g.row('Errors'),
        g.table('XID errors', 'XID events counted by the exporter since it started, per device, code and the workload that owned the device at the time.', [
          g.target('max_over_time(xpu_xid_errors_total{%s}[$__range])' % s, instant=true),
        ], [{ name: 'Events', unit: 'short' }]) + g.size(24),
        g.table('ECC errors in the time range', 'Memory errors per device and the workload that owned it; uncorrected errors may have corrupted its results.', [
          g.target('max without (scope) (increase(xpu_ecc_errors_total{%s}[$__range])) > 0' % s, instant=true),
        ], [{ name: 'Errors', unit: 'short' }]),
        g.table('Memory repairs', 'Retired pages and remapped rows per device; pending repairs take effect at the next GPU reset, a failed remap means the device needs replacing.', [
          g.target('sum by (%s) (xpu_retired_pages_total{%s})' % [device, s], instant=true),
          g.target('max by (%s) (xpu_retired_pages_pending{%s})' % [device, s], instant=true),
          g.target('sum by (%s) (xpu_remapped_rows{%s})' % [device, s], instant=true),
          g.target('max by (%s) (xpu_remapped_rows_pending{%s})' % [device, s], instant=true),
          g.target('max by (%s) (xpu_remapped_rows_failed{%s})' % [device, s], instant=true),
        ], [
          { name: 'Retired pages', unit: 'short' },
          { name: 'Pages pending', unit: 'short' },
          { name: 'Remapped rows', unit: 'short' },
          { name: 'Remaps pending', unit: 'short' },
          { name: 'Remap failed', unit: 'short' },
        ]),
        g.timeseries('ECC errors per second', 'Corrected and uncorrected memory errors per second.', [
          g.target('max without (scope) (rate(xpu_ecc_errors_total{%s}[$__rate_interval]))' % s, '%s {{type}}' % d.deviceLegend),
        ], min=0) + g.size(24),

        g.row('Throttling and temperature'),
        g.table('Throttling in the time range', 'Share of the time range each device was slowed down, per reason and workload (idle and configured clocks left out).', [
          g.target('avg_over_time(xpu_clock_throttled{%s, reason!~"%s"}[$__range]) > 0' % [s, benignThrottle], instant=true),
        ], [{ name: 'Time throttled', unit: 'percentunit' }]),
        g.timeseries('Active throttle reasons', 'Devices slowed down right now, one line per reason.', [
          g.target('xpu_clock_throttled{%s, reason!~"%s"} == 1' % [s, benignThrottle], '%s {{reason}}' % d.deviceLegend),
        ], min=0, max=1),
        g.timeseries('Temperature', 'Device and memory temperature.', [
          g.target('xpu_temperature_celsius{%s}' % s, '%s {{sensor}}' % d.deviceLegend),
        ], unit='celsius'),
        g.timeseries('Power', 'Power drawn and the power limit.', [
          g.target('xpu_power_watts{%s}' % s, d.deviceLegend),
          g.target('xpu_power_limit_watts{%s}' % s, 'limit %s' % d.deviceLegend),
        ], unit='watt', min=0),

        g.row('PCIe'),
        g.timeseries('PCIe replays per minute', 'Retried PCIe transfers; a steady rate points at a bad link, riser or slot.', [
          g.target('rate(xpu_pcie_replays_total{%s}[$__rate_interval]) * 60' % s, d.deviceLegend),
        ], min=0),
        g.table('PCIe links', 'Current and maximum link generation and width per device: a narrower link than the maximum is a fault; a slower generation is normal while the device idles.', [
          g.target('max by (%s) (xpu_pcie_link_generation{%s})' % [device, s], instant=true),
          g.target('max by (%s) (xpu_pcie_link_max_generation{%s})' % [device, s], instant=true),
          g.target('max by (%s) (xpu_pcie_link_width{%s})' % [device, s], instant=true),
          g.target('max by (%s) (xpu_pcie_link_max_width{%s})' % [device, s], instant=true),
        ], [
          { name: 'Generation', unit: 'short' },
          { name: 'Max generation', unit: 'short' },
          { name: 'Width', unit: 'short' },
          { name: 'Max width', unit: 'short' },
        ]),

        g.row('Inventory'),
        g.table('Devices', 'Driver, VBIOS, serial and PCI address of every device, for support cases and RMAs.', [
          g.target('xpu_device_info{%s}' % s, instant=true),
        ], [{ name: 'Info', unit: 'short' }], hidden=['Value']) + g.size(24),
      ]
    ),
  },
}

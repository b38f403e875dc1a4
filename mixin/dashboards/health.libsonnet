// Health & reliability: the health score and the events behind it (XID,
// ECC, memory repairs, throttling, PCIe), each with the workload it hit.
local g = import '../lib/grafana.libsonnet';
local util = import '../lib/util.libsonnet';
local common = import 'common.libsonnet';

{
  local c = $._config,
  local d = common(c),
  // Per-device panels follow the gpu variable; panels that name the
  // workload a device served follow the owner variables too.
  local s = d.ownerDeviceSelector,
  local dev = d.deviceSelector,
  local key = util.labels(c.deviceKeyLabels),
  // Device and owner columns for per-device tables.
  local device = util.labels([c.clusterLabel, 'node', 'gpu', 'uuid', 'model']),
  // The reasons the alerts count as faults (throttleReasons): an idle GPU,
  // clocks set on purpose and a busy GPU at its power cap are normal.
  local throttle = util.regex(c.throttleReasons),
  local hardwareXids = util.regex(c.xidHardware),
  // A device's labels for a per-device value computed on its key alone.
  local onDevice(expr) = |||
    %(expr)s
      * on (%(key)s) group_left (node, gpu, vendor)
      group by (%(key)s, node, gpu, vendor) (xpu_device_up{%(dev)s})
  ||| % { expr: expr, key: key, dev: dev },
  // A device counter's per-second rate across its owner changes: the
  // error that ends the owner's job is counted on a series born with the
  // change, which a rate of each series alone never sees (util.deviceIncrease).
  // A device counter's increase over the time range: each series that
  // grew, with the owner that held the device when it counted; and a
  // device whose count grew across an owner change (the error killed the
  // job, its count moved to a series born with the change), as the
  // device's series are labelled now; as XpuEccUncorrectableErrors reads it.
  // Rounded: increase() extrapolates a whole count to the edges of the
  // range (5.29 errors, probe F PF10).
  local eccInRange(x) = |||
    round(
      max without (scope) (increase(%(x)s[$__range])) > 0
      or on (%(key)s, type)
      (
        max without (scope) (%(x)s) * 0
          + on (%(key)s, type) group_left ()
          (max by (%(key)s, type) (%(increase)s) > 0)
      )
    )
  ||| % { x: x, key: key, increase: util.deviceIncrease(c, x, '$__range', ['scope', 'type']) },
  // The events an exporter-kept counter (Xid, AMD RAS: born with its
  // first event, started empty at every exporter start) counted in the
  // time range, per series, in whole events. Each series' last reading
  // within xidSeenLookback (range functions skip stale markers, so a
  // failed scrape or a gap shorter than that is no new start; a longer one
  // within one exporter's life counts its events again, as XpuXidErrors
  // takes such a series for new), 0 before
  // its first sample in the range, is compared minute by minute and at
  // the end of the range: a rise counts its size, a fall is an exporter
  // restart and counts the new value. max_over_time showed the count of
  // the exporter process alone, with events before the range, and after
  // a restart fewer than the range held (probe F PF7: 2 where 3);
  // increase() misses the event a series is born with and extrapolates.
  // The minutes are Prometheus's whole ones; the tail counts what came
  // after the last of them. An event in the minute before the range may
  // be counted.
  local eventsInRange(x) =
    local reading(offset) = '(last_over_time(%s[%s]%s) or 0 * last_over_time(%s[$__range] @ end()))' % [x, c.xidSeenLookback, offset, x];
    // A rise counts now - before, a fall now.
    local counted(before, now) = '%s - (%s <= bool %s) * %s' % [now, before, now, before];
    |||
      (
        sum_over_time((%(steps)s)[$__range:1m])
        + %(tail)s
      ) > 0
    ||| % {
      steps: counted(reading(' offset 1m'), reading('')),
      tail: counted('last_over_time(%s[1m:1m])' % reading(''), reading('')),
    },
  local deviceRate(x, by=[]) = 'rate((max by (%s) (%s))[$__rate_interval:$__interval])' % [util.labels(c.deviceKeyLabels + by), x],

  grafanaDashboards+:: {
    'xpu-health.json': g.dashboard(
      c,
      'xpu-health',
      'Health & reliability',
      'Device health score, XID and ECC errors, memory repairs, throttling and PCIe link problems, with the workload each one hit.',
      d.variables + [d.gpuVariable] + d.ownerVariables,
      [
        g.row('Health'),
        g.stat('Devices down', 'Physical devices that stopped answering the driver (xpu_device_up = 0), e.g. fell off the bus, or one of whose MIG instances did; a GPU counts once, with its instances or partitions.', [
          g.target('count(%s == 0) or vector(0)' % util.minOnGpu(c, 'xpu_device_up', dev), instant=true),
        ]) + g.size(6, 4),
        g.stat('Unhealthy devices', 'Physical devices with a health score below %g; a GPU counts once, by the lowest score of it and its MIG instances or partitions.' % c.healthScoreThreshold, [
          g.target('count(%s < %g) or vector(0)' % [util.minOnGpu(c, 'device:xpu_health_score:clamp_min', dev), c.healthScoreThreshold], instant=true),
        ]) + g.size(6, 4),
        g.stat('Failing collectors', 'Exporter collectors whose last run failed or missed its deadline.', [
          g.target('count(xpu_scrape_collector_success{%s} == 0) or vector(0)' % d.nodeSelector, instant=true),
        ]) + g.size(6, 4),
        g.stat('Attribution sources down', 'Sources of owner information (kubelet, Slurm, procfs) the exporter cannot read: devices lose their owner labels.', [
          g.target('count(xpu_attribution_source_up{%s} == 0) or vector(0)' % d.nodeSelector, instant=true),
        ]) + g.size(6, 4),
        g.table('Lowest health scores', 'The ten devices with the lowest health score (1 is healthy, 0 is down), with the workload each serves; README.md explains the formula.', [
          g.target('bottomk(10, device:xpu_health_score:clamp_min{%s})' % s, instant=true),
        ], [{ name: 'Health score', unit: 'percentunit' }]),
        g.table('Active health inputs', 'What lowers each score, and by how much.', [
          g.target(|||
            device:xpu_health_penalty:group{%(cluster)s}
              * on (%(key)s) group_left (node, gpu, model)
              group by (%(key)s, node, gpu, model) (xpu_device_up{%(s)s})
          ||| % { cluster: d.cluster, key: key, s: dev }, instant=true),
        ], [{ name: 'Penalty', unit: 'short' }]),

        g.row('Errors'),
        g.table('Hardware XID errors', "Hardware XID events (the mixin's xidHardware list: the device needs attention) in the time range, across exporter restarts, per device, code and the workload that owned the device at the time.", [
          g.target(eventsInRange('xpu_xid_errors_total{%s, xid=~"%s"}' % [s, hardwareXids]), instant=true),
        ], [{ name: 'Events', unit: 'short' }]),
        g.table('Application XID errors', 'Other XID events in the time range, raised when a user job crashes (bad memory access, stopped or preempted work): tell the owner, the device is fine.', [
          g.target(eventsInRange('xpu_xid_errors_total{%s, xid!~"%s"}' % [s, hardwareXids]), instant=true),
        ], [{ name: 'Events', unit: 'short' }]),
        g.table('AMD RAS errors', "AMD's counterpart of XID events: the RAS errors the exporter saw an AMD GPU's driver count in the time range, across exporter restarts, per block (umc is the memory), type and the workload that owned the device at the time. Uncorrected ones lower the health score as hardware XIDs do; deferred ones are poisoned data not yet consumed.", [
          g.target(eventsInRange('xpu_amd_ras_events_total{%s}' % s), instant=true),
        ], [{ name: 'Events', unit: 'short' }]),
        g.table('ECC errors in the time range', 'Memory errors per device and the workload that owned it; uncorrected errors may have corrupted its results.', [
          g.target(eccInRange('xpu_ecc_errors_total{%s}' % s), instant=true),
        ], [{ name: 'Errors', unit: 'short' }]),
        g.table('Gaudi HBM ECC errors in the time range', "An Intel Gaudi's HBM memory errors, a family of their own (hl-smi does not say whether its device totals include them), per device and the workload that owned it.", [
          g.target(eccInRange('xpu_gaudi_dram_ecc_errors_total{%s}' % s), instant=true),
        ], [{ name: 'Errors', unit: 'short' }]),
        g.table('Memory repairs', 'Retired pages and remapped rows per device; pending repairs take effect at the next GPU reset, a failed remap means the device needs replacing.', [
          g.target('sum by (%s) (xpu_retired_pages_total{%s})' % [device, dev], instant=true),
          g.target('max by (%s) (xpu_retired_pages_pending{%s})' % [device, dev], instant=true),
          g.target('sum by (%s) (xpu_remapped_rows{%s})' % [device, dev], instant=true),
          g.target('max by (%s) (xpu_remapped_rows_pending{%s})' % [device, dev], instant=true),
          g.target('max by (%s) (xpu_remapped_rows_failed{%s})' % [device, dev], instant=true),
        ], [
          { name: 'Retired pages', unit: 'short' },
          { name: 'Pages pending', unit: 'short' },
          { name: 'Remapped rows', unit: 'short' },
          { name: 'Remaps pending', unit: 'short' },
          { name: 'Remap failed', unit: 'short' },
        ]),
        g.timeseries('ECC errors per second', 'Corrected and uncorrected memory errors per second per device, counted across owner changes.', [
          g.target(onDevice(deviceRate('xpu_ecc_errors_total{%s}' % s, ['type'])), '{{node}} {{vendor}} gpu{{gpu}} {{type}}'),
        ], min=0) + g.size(24),

        g.row('Throttling and temperature'),
        g.table('Throttling in the time range', 'Share of the time range each device was slowed down, per reason and workload, for the reasons the alerts count (%s; idle, configured clocks and the power cap are normal).' % std.join(', ', c.throttleReasons), [
          g.target('avg_over_time(xpu_clock_throttled{%s, reason=~"%s"}[$__range]) > 0' % [s, throttle], instant=true),
        ], [{ name: 'Time throttled', unit: 'percentunit' }]),
        g.timeseries('Active throttle reasons', 'Devices slowed down right now, one line per reason.', [
          g.target('xpu_clock_throttled{%s, reason=~"%s"} == 1' % [s, throttle], '%s {{reason}}' % d.deviceLegend),
        ], min=0, max=1),
        g.timeseries('Temperature', "Device and memory temperature, with the limits the alerts use where the driver reports them: the core's slowdown and the memory's maximum (AMD: each sensor's crit).", [
          g.target('xpu_temperature_celsius{%s}' % s, '%s {{sensor}}' % d.deviceLegend),
          g.target('xpu_temperature_threshold_celsius{%s, threshold=~"slowdown|memory_max|crit"}' % s, 'limit %s {{sensor}} {{threshold}}' % d.deviceLegend),
        ], unit='celsius'),
        g.timeseries('Power', 'Power drawn and the power limit.', [
          g.target('xpu_power_watts{%s}' % s, d.deviceLegend),
          g.target('xpu_power_limit_watts{%s}' % s, 'limit %s' % d.deviceLegend),
        ], unit='watt', min=0),

        g.row('PCIe'),
        g.timeseries('PCIe replays per minute', 'Retried PCIe transfers; a steady rate points at a bad link, riser or slot.', [
          g.target(onDevice(deviceRate('xpu_pcie_replays_total{%s}' % s) + ' * 60'), '{{node}} {{vendor}} gpu{{gpu}}'),
        ], min=0),
        g.table('PCIe links', 'Current and maximum link generation and width per device: a narrower link than the maximum is a fault; a slower generation is normal while the device idles.', [
          g.target('max by (%s) (xpu_pcie_link_generation{%s})' % [device, dev], instant=true),
          g.target('max by (%s) (xpu_pcie_link_max_generation{%s})' % [device, dev], instant=true),
          g.target('max by (%s) (xpu_pcie_link_width{%s})' % [device, dev], instant=true),
          g.target('max by (%s) (xpu_pcie_link_max_width{%s})' % [device, dev], instant=true),
        ], [
          { name: 'Generation', unit: 'short' },
          { name: 'Max generation', unit: 'short' },
          { name: 'Width', unit: 'short' },
          { name: 'Max width', unit: 'short' },
        ]),

        g.row('Inventory'),
        g.table('Devices', 'Driver, VBIOS, serial and PCI address of every device, for support cases and RMAs.', [
          g.target('xpu_device_info{%s}' % dev, instant=true),
        ], [{ name: 'Info', unit: 'short' }], hidden=['Value']) + g.size(24),
      ]
    ),
  },
}

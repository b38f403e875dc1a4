// Alerts on one device. None of them aggregates device series away, so a
// fired alert keeps the device labels and, when the device has one owner,
// that owner's namespace/pod or Slurm job.
local util = import '../lib/util.libsonnet';

{
  local c = $._config,
  local fmt = c {
    deviceKey: util.labels(c.deviceKeyLabels),
    throttleRegex: util.regex(c.throttleReasons),
  },
  local device = util.deviceText,
  local owner = util.ownerText,

  prometheusAlerts+:: {
    groups+: [{
      name: 'xpu-device',
      rules: [
        util.alert(c, {
          alert: 'XpuTemperatureHigh',
          expr: |||
            xpu_temperature_celsius{%(xpuSelector)s, sensor="gpu"} > %(temperatureWarningCelsius)g
          ||| % fmt,
          'for': c.temperatureWarningFor,
          labels: { severity: 'warning' },
          annotations: {
            summary: 'A device is running hot.',
            description: '%s (owner: %s) is at {{ $value }} °C, above %g °C.' % [device, owner, c.temperatureWarningCelsius],
          },
        }),
        util.alert(c, {
          alert: 'XpuTemperatureCritical',
          expr: |||
            xpu_temperature_celsius{%(xpuSelector)s, sensor="gpu"} > %(temperatureCriticalCelsius)g
          ||| % fmt,
          'for': c.temperatureCriticalFor,
          labels: { severity: 'critical' },
          annotations: {
            summary: 'A device is about to shut down from heat.',
            description: '%s (owner: %s) is at {{ $value }} °C, above %g °C.' % [device, owner, c.temperatureCriticalCelsius],
          },
        }),
        util.alert(c, {
          alert: 'XpuDeviceAllocatedIdle',
          // One series per owner of the idle device, labelled by the owner's
          // allocation, so a time-sliced GPU names every co-owner even though
          // its device series carry no owner labels. `> bool 0` turns the
          // allocation (1, 1/N or a MIG fraction) into a factor of 1, leaving
          // the device utilization as the value.
          expr: |||
            (xpu_utilization_ratio{%(xpuSelector)s} < %(idleUtilizationThreshold)g)
              * on (%(deviceKey)s) group_right ()
              (xpu_workload_allocated_devices{%(xpuSelector)s} > bool 0)
          ||| % fmt,
          'for': c.allocatedIdleFor,
          labels: { severity: 'info' },
          annotations: {
            summary: 'An allocated device is doing no work.',
            description: '%s is allocated to %s but has been below %s utilization for %s (now {{ $value | humanizePercentage }}).' % [device, owner, util.percent(c.idleUtilizationThreshold), c.allocatedIdleFor],
          },
        }),
        util.alert(c, {
          alert: 'XpuMemoryNearlyFull',
          // xpu_memory_utilization_ratio is memory-controller busy time, not
          // capacity, so the fill level comes from used / total.
          expr: |||
            xpu_memory_used_bytes{%(xpuSelector)s}
              / xpu_memory_total_bytes{%(xpuSelector)s}
              > %(memoryNearlyFullRatio)g
          ||| % fmt,
          'for': c.memoryNearlyFullFor,
          labels: { severity: 'warning' },
          annotations: {
            summary: 'A device is nearly out of memory.',
            description: '%s (owner: %s) has {{ $value | humanizePercentage }} of its memory in use.' % [device, owner],
          },
        }),
        util.alert(c, {
          alert: 'XpuEccUncorrectableErrors',
          // Volatile and aggregate counters count the same error; max over
          // scope raises one alert per device whichever scope the vendor has.
          expr: |||
            max without (scope) (
              increase(xpu_ecc_errors_total{%(xpuSelector)s, type="uncorrected"}[%(eccUncorrectableWindow)s])
            ) > 0
          ||| % fmt,
          'for': c.eccUncorrectableFor,
          labels: { severity: 'critical' },
          annotations: {
            summary: 'A device reported uncorrectable memory errors.',
            description: '%s (owner: %s) reported uncorrectable ECC errors in the last %s; the workload may have read corrupt data.' % [device, owner, c.eccUncorrectableWindow],
          },
        }),
        util.alert(c, {
          alert: 'XpuXidErrors',
          // The counter carries the owner at the moment of the event, and a
          // new (xid, owner) series appears with its first event already
          // counted, which increase() cannot see: the second arm catches
          // series born inside the window.
          expr: |||
            increase(xpu_xid_errors_total{%(xpuSelector)s}[%(xidWindow)s]) > 0
            or (
              xpu_xid_errors_total{%(xpuSelector)s}
                unless xpu_xid_errors_total{%(xpuSelector)s} offset %(xidWindow)s
            )
          ||| % fmt,
          'for': c.xidFor,
          labels: { severity: 'warning' },
          annotations: {
            summary: 'A device reported XID errors.',
            description: '%s reported XID {{ $labels.xid }} within the last %s while used by %s.' % [device, c.xidWindow, owner],
          },
        }),
        util.alert(c, {
          alert: 'XpuClocksThrottled',
          expr: |||
            xpu_clock_throttled{%(xpuSelector)s, reason=~"%(throttleRegex)s"} == 1
          ||| % fmt,
          'for': c.throttleFor,
          labels: { severity: 'warning' },
          annotations: {
            summary: 'A device is slowed down by hardware, thermal or power limits.',
            description: '%s (owner: %s) has been throttled for %s, reason {{ $labels.reason }}.' % [device, owner, c.throttleFor],
          },
        }),
        util.alert(c, {
          alert: 'XpuPcieReplaysHigh',
          expr: |||
            rate(xpu_pcie_replays_total{%(xpuSelector)s}[5m]) * 60 > %(pcieReplaysPerMinute)g
          ||| % fmt,
          'for': c.pcieReplaysFor,
          labels: { severity: 'warning' },
          annotations: {
            summary: 'A device is retrying many PCIe transfers.',
            description: '%s (owner: %s) replays {{ $value | humanize }} PCIe packets per minute; the link or riser is likely faulty.' % [device, owner],
          },
        }),
      ],
    }],
  },
}

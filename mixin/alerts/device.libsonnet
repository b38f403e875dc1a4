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

  // critical: the core at its slowdown threshold, the memory at its
  // maximum, an AMD sensor at its own crit (throttle) limit; else the core
  // past its maximum operating temperature, the memory or an AMD sensor
  // within the margin of that limit.
  local temperatureOver(critical) =
    if critical then
      util.overTemperatureLimit(c, 'core', 'slowdown', 0, 0, c.temperatureCriticalCelsius)
      + 'or\n'
      + util.overTemperatureLimit(c, 'memory', 'memory_max', 0, 0, c.memoryTemperatureCriticalCelsius)
    else
      util.overTemperatureLimit(c, 'core', 'gpu_max', 0, c.temperatureLimitMarginCelsius, c.temperatureWarningCelsius)
      + 'or\n'
      + util.overTemperatureLimit(c, 'memory', 'memory_max', c.memoryTemperatureMarginCelsius, c.temperatureLimitMarginCelsius, c.memoryTemperatureWarningCelsius),
  local temperatureSample = 'xpu_temperature_celsius{%(xpuSelector)s}' % c,
  local device = util.deviceText,
  local owner = util.ownerText,

  local sensorKey = fmt.deviceKey + ', sensor',
  local hotRecord = 'device_sensor:xpu_temperature_high:bool',
  local criticalRecord = 'device_sensor:xpu_temperature_critical:bool',
  // A gap bridged: longer than an exporter rollout's (keepFiringFor).
  local bridge = c.keepFiringFor,
  // Inputs of alerts held on instant values (util.lastReading).
  local read(series) = util.lastReading(c, series),
  local deviceRead(series) = util.lastDeviceReading(c, series),

  prometheusAlerts+:: {
    groups+: [{
      name: 'xpu-device',
      rules: [
        if std.objectHas(r, 'alert') then r { expr: util.withoutDeadExporters(c, super.expr) } else r
        for r in [

          // Per device and sensor, whoever owns the device, 1 while it is at
          // or past its High level (Critical included), or Critical; 0 while
          // it is not: what the temperature alerts hold (util.heldOnDevice).
          {
            record: hotRecord,
            expr: util.heldRecord(temperatureOver(false), sensorKey, temperatureSample),
          },
          {
            record: criticalRecord,
            expr: util.heldRecord(temperatureOver(true), sensorKey, temperatureSample),
          },
          util.alert(c, {
            alert: 'XpuTemperatureCritical',
            // Before XpuTemperatureHigh, which leaves out what it fires on in
            // the same evaluation.
            expr: util.heldOnDevice(temperatureSample, sensorKey, criticalRecord, c.temperatureCriticalFor, bridge, c.missedScrapeWindow),
            'for': '0m',  // held in expr, whoever owned the device
            labels: { severity: 'critical' },
            annotations: {
              summary: 'A device is about to shut down from heat.',
              description: '%s (owner: %s) has its {{ $labels.sensor }} sensor at {{ $value }} °C, at the limit where the hardware slows down and then shuts off.' % [device, owner],
            },
          }),
          util.alert(c, {
            alert: 'XpuTemperatureHigh',
            // At or past the High level, Critical included, for
            // temperatureWarningFor whoever held the device, and left out
            // while XpuTemperatureCritical fires on the same sensor: one
            // event raises one page at a time. A sensor at its slowdown
            // level half the time (a GPU throttling, a degree either side)
            // held neither alert while each level's hold started again at
            // the other's evaluations (probe24-tempalerts D2); handing over
            // from Critical to High, and back, neither overlaps nor leaves a
            // gap (review23 F6, probe24-tempalerts D1).
            expr: util.heldOnDevice(temperatureSample, sensorKey, hotRecord, c.temperatureWarningFor, bridge, c.missedScrapeWindow)
                  + '  unless on (%s)\nALERTS{alertname="XpuTemperatureCritical", alertstate="firing"}\n' % sensorKey,
            'for': '0m',  // held in expr, whoever owned the device
            labels: { severity: 'warning' },
            annotations: {
              summary: 'A device is running hot.',
              description: '%s (owner: %s) has its {{ $labels.sensor }} sensor at {{ $value }} °C, past its maximum operating temperature or close to where the hardware slows down.' % [device, owner],
            },
          }),
          util.alert(c, {
            alert: 'XpuDeviceLost',
            // The exporter keeps serving xpu_device_up 0 for a device that
            // stops answering (GPU_IS_LOST, Xid 79), and every other series of
            // that device vanishes, so no other alert can see it. Not for a
            // Gaudi while the Gaudi collector fails: a failing hl-smi reports
            // every Gaudi it knew down, for want of a reading, not because
            // they fell off the bus; XpuExporterDown names the collector.
            // A lost GPU's MIG instances or partitions, down with it, are
            // the one alert of the GPU.
            expr: |||
              %(lost)s
                unless on (%(target)s, vendor)
              %(failing)s
            ||| % (fmt {
                     target: util.labels(c.targetLabels),
                     failing: util.collectorFailing(c, read),
                     lost: util.withoutPartitionsOf(c, read('xpu_device_up{%(xpuSelector)s}' % c) + ' == 0', read('xpu_device_up{%(xpuSelector)s, parent_uuid="", uuid!=""}' % c) + ' == 0'),
                   }),
            'for': c.deviceLostFor,
            labels: { severity: 'critical' },
            annotations: {
              summary: 'A device stopped answering the driver.',
              description: '%s (owner: %s) no longer answers the driver: it most likely fell off the bus and needs a reset or a node drain.' % [device, owner],
            },
          }),
          util.alert(c, {
            alert: 'XpuDeviceAllocatedIdle',
            // One series per owner of the idle device, labelled by the owner's
            // allocation, so a time-sliced GPU names every co-owner even though
            // its device series carry no owner labels. `> bool 0` turns the
            // allocation (1, 1/N or a MIG fraction) into a factor of 1, leaving
            // the device utilization as the value. A GPU in MIG mode has no
            // utilization of its own: allocated whole (the NVIDIA device
            // plugin's migStrategy none) it is judged by its instances'
            // (util.deviceUtilization).
            expr: |||
              (
                (
              %(utilization)s
                ) < %(idleUtilizationThreshold)g
              )
                * on (%(deviceKey)s) group_right ()
                (%(allocated)s > bool 0)
            ||| % (fmt { allocated: read('xpu_workload_allocated_devices{%(xpuSelector)s}' % c), utilization: util.indent(util.indent(util.deviceUtilization(c, c.xpuSelector, deviceRead))) }),
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
            // capacity, so the fill level comes from used / total. A total of
            // 0 (a driver that reports none) would make the ratio +Inf or
            // NaN: such devices are left out.
            expr: |||
              %(used)s
                / (%(total)s > 0)
                > %(memoryNearlyFullRatio)g
            ||| % (fmt { used: read('xpu_memory_used_bytes{%(xpuSelector)s}' % c), total: read('xpu_memory_total_bytes{%(xpuSelector)s}' % c) }),
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
            // First arm: a series that grew, labelled with the owner that held
            // the device when it counted the error. Second arm: a device whose
            // count grew across an owner change (the error killed the job and
            // the count moved to a new series, born with it; see
            // util.deviceIncrease), labelled as the device's series are now.
            // A Gaudi's HBM errors are a family of their own (hl-smi does
            // not say whether its device totals include them), read alike
            // where the device totals show none.
            local uncorrected(ecc) = |||
              (
                max without (scope) (
                  increase(%(ecc)s[%(eccUncorrectableWindow)s])
                ) > 0
                or on (%(deviceKey)s)
                (
                  max without (scope) (%(ecc)s) * 0
                    + on (%(deviceKey)s) group_left ()
                    (max by (%(deviceKey)s) (%(deviceIncrease)s) > 0)
                )
              )
            ||| % (fmt { ecc: ecc, deviceIncrease: util.deviceIncrease(c, ecc, c.eccUncorrectableWindow, ['scope']) }),
            // Rounded, as the value counts errors: increase() extrapolates
            // (9.31, probe F PF10).
            expr: 'round(\n%s\n)\n' % util.indent(
              uncorrected('xpu_ecc_errors_total{%(xpuSelector)s, type="uncorrected"}' % c)
              + 'or on (%s)\n' % fmt.deviceKey
              + uncorrected('xpu_gaudi_dram_ecc_errors_total{%(xpuSelector)s, type="uncorrected"}' % c)
            ),
            'for': c.eccUncorrectableFor,
            labels: { severity: 'critical' },
            annotations: {
              summary: 'A device reported uncorrectable memory errors.',
              description: '%s (owner: %s) reported uncorrectable ECC errors in the last %s; the workload may have read corrupt data.' % [device, owner, c.eccUncorrectableWindow],
            },
          }),
          util.alert(c, {
            alert: 'XpuXidErrors',
            // Hardware Xids only (xidHardware); the counter carries the owner
            // at the moment of the event. Rounded, as the value counts
            // events: increase() extrapolates.
            expr: 'round(\n%s\n)\n' % util.indent(util.xidRecent(c, c.xidWindow)),
            'for': c.xidFor,
            labels: { severity: 'warning' },
            annotations: {
              summary: 'A device reported a hardware Xid error.',
              description: '%s reported hardware XID {{ $labels.xid }} within the last %s while used by %s.' % [device, c.xidWindow, owner],
            },
          }),
          util.alert(c, {
            alert: 'XpuClocksThrottled',
            // The flags are sampled at each scrape; their average over the
            // window is the fraction of samples throttled. The largest over
            // the reasons makes one alert per device, whichever reason. The
            // samples may cover less than the window (Prometheus or the
            // device's owner series started within it), so the description
            // speaks of the samples, not of the whole window (probe F PF8:
            // "100% of the last 15m" after 5 minutes of data).
            expr: |||
              max without (reason) (
                avg_over_time(xpu_clock_throttled{%(xpuSelector)s, reason=~"%(throttleRegex)s"}[%(throttleWindow)s])
              ) > %(throttleFraction)g
            ||| % fmt,
            'for': c.throttleFor,
            labels: { severity: 'warning' },
            annotations: {
              summary: 'A device is slowed down by hardware, thermal or power limits.',
              description: '%s (owner: %s) was throttled in {{ $value | humanizePercentage }} of its samples of the last %s by hardware, thermal or power-brake limits.' % [device, owner, c.throttleWindow],
            },
          }),
        ]
      ],
    }],
  },
}

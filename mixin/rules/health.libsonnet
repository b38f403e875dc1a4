// The device health score: 1 for a healthy device, lowered by each active
// reliability input, 0 for a device that stopped answering. README.md
// documents the formula; the alert XpuDeviceHealthDegraded reads it.
local util = import '../lib/util.libsonnet';

{
  local c = $._config,
  local key = util.labels(c.deviceKeyLabels),
  local fmt = c {
    idle: c.idleUtilizationThreshold,
    key: key,
  },

  // One series per device while an input is active, worth that input's
  // weight; absent otherwise, so the score sums only what is wrong.
  local penalty(input, active) = {
    record: 'device:xpu_health_penalty:group',
    labels: { input: input },
    expr: '%g * group by (%s) (\n%s\n)\n' % [c.healthWeights[input], key, util.indent(active)],
  },

  prometheusRules+:: {
    groups+: [{
      name: 'xpu-health.rules',
      rules: [
        // Counted per device (util.deviceIncrease), so that an error whose
        // count moved to a new owner's series still counts.
        // A Gaudi's HBM errors are a family of their own.
        penalty('ecc', util.deviceIncrease(c, 'xpu_ecc_errors_total{%(xpuSelector)s, type="uncorrected"}' % fmt, c.healthWindow, ['scope']) + ' > 0\nor\n'
                       + util.deviceIncrease(c, 'xpu_gaudi_dram_ecc_errors_total{%(xpuSelector)s, type="uncorrected"}' % fmt, c.healthWindow, ['scope']) + ' > 0\n'),
        // Rows or pages waiting for a GPU reset to be retired, or a remap
        // that failed (the device needs replacing).
        penalty('remap', |||
          {__name__=~"xpu_remapped_rows_pending|xpu_remapped_rows_failed|xpu_retired_pages_pending", %(xpuSelector)s} > 0
        ||| % fmt),
        // Hardware Xids only (xidHardware): an application Xid means a user
        // job crashed, not that the device is unwell. An AMD GPU's
        // uncorrected RAS errors, in any block, are its hardware Xids: the
        // hardware failed to correct an error, whatever job ran. Corrected
        // ones are a wear trend (the memory's is the ecc_corrected input);
        // deferred ones (poisoned data not yet consumed) stay on the
        // dashboards.
        penalty('xid', util.xidRecent(c, c.healthWindow) + 'or\n' + util.eventsRecent(c, 'xpu_amd_ras_events_total{%(xpuSelector)s, type="uncorrected"}' % fmt, c.healthWindow)),
        // A corrected-error rate that keeps rising is the early sign of
        // memory that will soon produce uncorrectable errors. Volatile and
        // aggregate counters count the same errors: the largest is taken.
        // Per device, so an hour's errors split across two owners' series
        // still add up.
        penalty('ecc_corrected', |||
          max by (%(key)s) (
            %(increase)s
          ) > %(eccCorrectedPerHour)g
        ||| % (fmt { increase: util.deviceIncrease(c, 'xpu_ecc_errors_total{%(xpuSelector)s, type="corrected"}' % c, '1h', ['scope']) })),
        // A narrower link is always a fault; a slower generation only while
        // the device is busy, because idle GPUs lower the link speed to save
        // power; replays above DCGM's health-check rate mean a faulty link
        // or riser. The replay counter is read per device
        // (util.deviceRate), across owner changes.
        penalty('pcie', |||
          %(replays)s * 60 > %(pcieReplaysPerMinute)g
          or xpu_pcie_link_width{%(xpuSelector)s} < xpu_pcie_link_max_width{%(xpuSelector)s}
          or (
            xpu_pcie_link_generation{%(xpuSelector)s} < xpu_pcie_link_max_generation{%(xpuSelector)s}
              and on (%(key)s) xpu_utilization_ratio{%(xpuSelector)s} >= %(idle)g
          )
        ||| % (fmt { replays: util.deviceRate(c, 'xpu_pcie_replays_total{%(xpuSelector)s}' % c, '5m') })),
        // Thermal throttling, or the core at XpuTemperatureHigh's level:
        // past its maximum operating temperature, or (AMD, per sensor) the
        // edge or junction within the margin of its own crit limit.
        penalty('thermal', |||
          xpu_clock_throttled{%(xpuSelector)s, reason=~"hw_thermal_slowdown|sw_thermal_slowdown"} == 1
          or
        ||| % fmt + util.overTemperatureLimit(c, 'core', 'gpu_max', 0, c.temperatureLimitMarginCelsius, c.temperatureWarningCelsius)),
        {
          record: 'device:xpu_health_score:clamp_min',
          // Keeps the labels of xpu_device_up (device and owner labels);
          // devices with no active input score their up value. None for
          // the Gaudis of a failing Gaudi collector (a failing hl-smi
          // reports them down): their health is unknown, and
          // XpuExporterDown names the collector.
          expr: |||
            clamp_min(
              xpu_device_up{%(xpuSelector)s}
                - on (%(key)s) group_left ()
                sum by (%(key)s) (device:xpu_health_penalty:group)
              or xpu_device_up{%(xpuSelector)s},
              0
            )
              unless on (%(target)s, vendor)
            %(failing)s
          ||| % (fmt { target: util.labels(c.targetLabels), failing: util.collectorFailing(c) }),
        },
      ],
    }],
  },
}

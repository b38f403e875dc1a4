// The device health score: 1 for a healthy device, lowered by each active
// reliability input, 0 for a device that stopped answering. README.md
// documents the formula; the alert XpuDeviceHealthDegraded reads it.
local util = import '../lib/util.libsonnet';

{
  local c = $._config,
  local key = util.labels(c.deviceKeyLabels),
  local fmt = c {
    windowSeconds: util.seconds(c.healthWindow),
    idle: c.idleUtilizationThreshold,
  },

  // One series per device while an input is active, worth that input's
  // weight; absent otherwise, so the score sums only what is wrong.
  local penalty(input, active) = {
    record: 'device:xpu_health_penalty:weight',
    labels: { input: input },
    expr: '%g * group by (%s) (\n%s\n)\n' % [c.healthWeights[input], key, util.indent(active)],
  },

  prometheusRules+:: {
    groups+: [{
      name: 'xpu-health.rules',
      rules: [
        penalty('ecc', |||
          increase(xpu_ecc_errors_total{%(xpuSelector)s, type="uncorrected"}[%(healthWindow)s]) > 0
        ||| % fmt),
        // Rows or pages waiting for a GPU reset to be retired, or a remap
        // that failed (the device needs replacing).
        penalty('remap', |||
          {__name__=~"xpu_remapped_rows_pending|xpu_remapped_rows_failed|xpu_retired_pages_pending", %(xpuSelector)s} > 0
        ||| % fmt),
        // The timestamp rather than the counter: a counter series born with
        // its first event shows no increase.
        penalty('xid', |||
          max without (type) (time() - xpu_device_last_event_timestamp_seconds{%(xpuSelector)s, type="xid"}) < %(windowSeconds)d
        ||| % fmt),
        // A narrower link is always a fault; a slower generation only while
        // the device is busy, because idle GPUs lower the link speed to save
        // power.
        penalty('pcie', |||
          xpu_pcie_link_width{%(xpuSelector)s} < xpu_pcie_link_max_width{%(xpuSelector)s}
          or (
            xpu_pcie_link_generation{%(xpuSelector)s} < xpu_pcie_link_max_generation{%(xpuSelector)s}
              and xpu_utilization_ratio{%(xpuSelector)s} >= %(idle)g
          )
        ||| % fmt),
        penalty('thermal', |||
          xpu_clock_throttled{%(xpuSelector)s, reason=~"hw_thermal_slowdown|sw_thermal_slowdown"} == 1
          or xpu_temperature_celsius{%(xpuSelector)s, sensor="gpu"} > %(temperatureWarningCelsius)g
        ||| % fmt),
        {
          record: 'device:xpu_health:score',
          // Keeps the labels of xpu_device_up (device and owner labels);
          // devices with no active input score their up value.
          expr: |||
            clamp_min(
              xpu_device_up{%(xpuSelector)s}
                - on (%(key)s) group_left ()
                sum by (%(key)s) (device:xpu_health_penalty:weight)
              or xpu_device_up{%(xpuSelector)s},
              0
            )
          ||| % (fmt { key: key }),
        },
      ],
    }],
  },
}

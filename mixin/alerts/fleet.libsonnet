// Alerts on the fleet as a whole: capacity left idle, devices whose health
// score (rules/health.libsonnet) has dropped, and memory wearing out.
local util = import '../lib/util.libsonnet';

{
  local c = $._config,
  local device = util.deviceText,
  local owner = util.ownerText,

  prometheusAlerts+:: {
    groups+: [{
      name: 'xpu-fleet',
      rules: [
        util.alert(c, {
          alert: 'XpuFleetIdleFractionHigh',
          // Counts allocated and free devices alike: both are capacity the
          // fleet pays for and nobody uses.
          expr: |||
            count by (%(clusterLabel)s) (xpu_utilization_ratio{%(xpuSelector)s} < %(idleUtilizationThreshold)g)
              / count by (%(clusterLabel)s) (xpu_utilization_ratio{%(xpuSelector)s})
              > %(fleetIdleFraction)g
          ||| % c,
          'for': c.fleetIdleFor,
          labels: { severity: 'info' },
          annotations: {
            summary: 'A large part of the fleet is idle.',
            description: '{{ $value | humanizePercentage }} of the devices%s have been below %s utilization for %s.' % [util.clusterText(c), util.percent(c.idleUtilizationThreshold), c.fleetIdleFor],
          },
        }),
        util.alert(c, {
          alert: 'XpuDeviceHealthDegraded',
          expr: |||
            device:xpu_health:score < %(healthScoreThreshold)g
          ||| % c,
          'for': c.healthScoreFor,
          labels: { severity: 'warning' },
          annotations: {
            summary: 'A device health score is low.',
            description: '%s (owner: %s) has a health score of {{ $value }}; the active inputs are in device:xpu_health_penalty:weight.' % [device, owner],
          },
        }),
        util.alert(c, {
          alert: 'XpuEccCorrectedErrorRateHigh',
          // A rising corrected-error rate is the early sign of memory that
          // will soon produce uncorrectable errors.
          expr: |||
            max without (scope) (
              increase(xpu_ecc_errors_total{%(xpuSelector)s, type="corrected"}[1h])
            ) > %(eccCorrectedPerHour)g
          ||| % c,
          'for': c.eccCorrectedFor,
          labels: { severity: 'warning' },
          annotations: {
            summary: 'A device corrects many memory errors.',
            description: '%s (owner: %s) corrected {{ $value | humanize }} ECC errors in the last hour.' % [device, owner],
          },
        }),
      ],
    }],
  },
}

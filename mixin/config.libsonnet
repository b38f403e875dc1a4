{
  _config+:: {
    // Selects the exporter's series in every rule and dashboard query. Use
    // target labels only: namespace/pod on these series name the owner of
    // a device, not the exporter.
    xpuSelector: 'job="xpu-exporter"',

    // The label that tells clusters apart behind Thanos/Mimir/Cortex. Every
    // aggregation keeps it, so one set of rules serves one or many clusters.
    clusterLabel: 'cluster',
    // Shows the cluster variable on the dashboards.
    showMultiCluster: false,

    // The labels that identify one device across a fleet: two series from
    // the same scrape target with the same uuid belong to the same device.
    deviceKeyLabels: [self.clusterLabel, 'job', 'instance', 'uuid'],

    // Pod labels the exporter copies onto owner series (its pod-label
    // allow-list, as Prometheus label names). Alerts and per-pod views keep
    // them next to the owner labels below.
    podLabelAllowList: [],

    // Labels naming the owner of a device, per kind of owner.
    ownerLabels: {
      kubernetes: ['namespace', 'pod', 'container', 'workload', 'workload_kind'],
      slurm: ['slurm_job_id', 'slurm_user', 'slurm_account', 'slurm_partition', 'slurm_qos'],
      process: ['unit', 'user', 'command'],
    },

    // Device alerts.
    temperatureWarningCelsius: 85,
    temperatureWarningFor: '5m',
    temperatureCriticalCelsius: 95,
    temperatureCriticalFor: '2m',
    // Below this utilization a device counts as idle (alerts, fleet idle
    // fraction, health score's busy gate).
    idleUtilizationThreshold: 0.05,
    allocatedIdleFor: '15m',
    memoryNearlyFullRatio: 0.95,
    memoryNearlyFullFor: '5m',
    // Counter-based alerts look back this far; they fire at once (for: 0m)
    // because a single uncorrectable ECC or XID event already matters.
    eccUncorrectableWindow: '10m',
    eccUncorrectableFor: '0m',
    xidWindow: '10m',
    xidFor: '0m',
    // sw_power_cap is left out on purpose: a busy GPU sitting at its power
    // limit is normal, not a fault.
    throttleReasons: ['hw_slowdown', 'sw_thermal_slowdown', 'hw_thermal_slowdown', 'hw_power_brake_slowdown'],
    throttleFor: '10m',
    // DCGM's health check flags more than 8 PCIe replays per minute.
    pcieReplaysPerMinute: 8,
    pcieReplaysFor: '5m',

    // Fleet alerts.
    fleetIdleFraction: 0.2,
    fleetIdleFor: '15m',
    healthScoreThreshold: 0.5,
    healthScoreFor: '15m',
    eccCorrectedPerHour: 100,
    eccCorrectedFor: '15m',

    // Device health score (see README.md): how far back an event still
    // lowers the score, and how much each input takes off a score of 1.
    healthWindow: '1h',
    healthWeights: {
      ecc: 0.6,
      remap: 0.6,
      xid: 0.3,
      pcie: 0.3,
      thermal: 0.3,
    },

    // Inference alerts.
    inferenceTtftP95Seconds: 2,
    inferenceTtftFor: '10m',
    inferenceLatencyP99Seconds: 60,
    inferenceLatencyFor: '10m',
    inferenceKvCacheUsageRatio: 0.95,
    inferenceKvCacheFor: '15m',
    inferenceQueueWaiting: 10,
    inferenceQueueFor: '10m',
    // Fires when generated tokens/s fall below this fraction of 1h ago.
    inferenceThroughputDropRatio: 0.5,
    inferenceThroughputFor: '15m',
    inferenceErrorRatio: 0.05,
    inferenceErrorFor: '10m',

    // Usage rules (allocation, GPU-hours, cost, energy) are evaluated at a
    // fixed interval so that sum_over_time(rule[30d]) * interval / 1h turns
    // their per-hour values into totals.
    usageRulesInterval: '1m',
    // Grid carbon intensity in gCO2 per kWh, with per-cluster overrides
    // (cluster label value -> intensity) for fleets spread over regions.
    gridCarbonIntensity: 400,
    gridCarbonIntensityByCluster: {},

    runbookURLPattern: 'https://github.com/xpu-exporter/xpu_exporter/blob/main/mixin/runbook.md#%s',

    // Grafana.
    dashboardTags: ['xpu-exporter-mixin'],
    dashboardNamePrefix: 'XPU / ',
    dashboardRefresh: '30s',
    dashboardTimezone: 'utc',
  },
}

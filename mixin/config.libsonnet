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

    // The labels that identify one exporter process (a scrape target): its
    // own series (up, process_start_time_seconds, xpu_scrape_*) are joined
    // to its device series on these. `exporter` is the vendor DaemonSet,
    // which the chart's ServiceMonitor sets: a node labelled for two
    // vendors runs two exporter pods with the same instance (the node).
    // Where it is not set (bare metal) it is empty on both sides of a join
    // and changes nothing.
    targetLabels: [self.clusterLabel, 'job', 'instance', 'exporter'],

    // Pod labels the exporter is told to copy (its pod-label allow-list,
    // sanitized as Prometheus label names, e.g. 'team'). The exporter puts
    // them only on xpu_workload_info, as label_<name>; inference alerts join
    // them from there.
    podLabelAllowList: [],

    // Labels naming the owner of a device, per kind of owner.
    ownerLabels: {
      kubernetes: ['namespace', 'pod', 'container', 'workload', 'workload_kind'],
      slurm: ['slurm_job_id', 'slurm_user', 'slurm_account', 'slurm_partition', 'slurm_qos'],
      process: ['unit', 'user', 'command'],
    },

    // Device alerts.
    //
    // Temperatures are judged against each GPU's own limits, which the
    // exporter reads from the driver (xpu_temperature_threshold_celsius):
    // High when the GPU core passes its maximum operating temperature or the
    // memory comes within memoryTemperatureMarginCelsius of its maximum;
    // Critical when the core reaches its slowdown threshold or the memory its
    // maximum. AMD gives one limit per sensor, crit (where the firmware
    // throttles): each sensor is Critical at its own crit and High within
    // temperatureLimitMarginCelsius of it. The fixed values below apply only
    // to sensors whose driver reports no such limit (Gaudi): the memory's
    // to sensor="memory", the others to every other sensor.
    temperatureWarningCelsius: 85,
    temperatureWarningFor: '5m',
    temperatureCriticalCelsius: 95,
    temperatureCriticalFor: '2m',
    memoryTemperatureWarningCelsius: 90,
    memoryTemperatureCriticalCelsius: 95,
    memoryTemperatureMarginCelsius: 5,
    temperatureLimitMarginCelsius: 5,
    // A GPU that stopped answering the driver (fell off the bus) pages
    // within minutes.
    deviceLostFor: '2m',
    // Alerts held on instant values (allocated idle, memory, device lost,
    // fleet idle, health, the start of a temperature hold) read each
    // series' last sample within this window, so that a failed scrape
    // (its target's series stale for an evaluation) does not start their
    // `for` again. Longer than two scrape intervals: just before the
    // scrape after a failed one, the last sample is nearly two intervals
    // old. 90s covers one failed scrape at a 30s interval, two at 15s; a
    // series that is gone is read this much longer.
    missedScrapeWindow: '90s',
    // Below this utilization a device counts as idle (alerts, fleet idle
    // fraction, health score's busy gate).
    idleUtilizationThreshold: 0.05,
    allocatedIdleFor: '15m',
    memoryNearlyFullRatio: 0.95,
    memoryNearlyFullFor: '5m',
    // Counter-based alerts look back this far; they fire at once (for: 0m)
    // because a single uncorrectable ECC or hardware Xid already matters.
    eccUncorrectableWindow: '10m',
    eccUncorrectableFor: '0m',
    xidWindow: '10m',
    xidFor: '0m',
    // A counter series seen anywhere in this range before the window is not
    // new: scrape gaps and stale markers shorter than this never look like
    // a first event.
    xidSeenLookback: '1h',
    // Xid codes that mean the GPU itself needs attention (NVIDIA's Xid
    // catalogue, docs.nvidia.com/deploy/xid-errors): 48 double-bit ECC,
    // 61/62 internal micro-controller fault, 63/64 ECC page retirement or
    // row remapping, 74 NVLink error, 79 fallen off the bus, 92 high
    // single-bit ECC rate, 94/95 contained/uncontained ECC error, 119/120
    // GSP timeout/error, 140 unrecovered ECC error. These page and lower the
    // health score; the others (13, 31, 43, 45, … raised when a user job
    // crashes) are only shown on the dashboards.
    xidHardware: ['48', '61', '62', '63', '64', '74', '79', '92', '94', '95', '119', '120', '140'],
    // sw_power_cap is left out on purpose: a busy GPU sitting at its power
    // limit is normal, not a fault. A device alerts once it has been
    // throttled for one of these reasons more than throttleFraction of
    // throttleWindow: the flag is sampled at each scrape and flips often.
    throttleReasons: ['hw_slowdown', 'sw_thermal_slowdown', 'hw_thermal_slowdown', 'hw_power_brake_slowdown'],
    throttleWindow: '15m',
    throttleFraction: 0.5,
    throttleFor: '5m',
    // DCGM's health check flags more than 8 PCIe replays per minute (an
    // input of the health score).
    pcieReplaysPerMinute: 8,

    // Fleet alerts.
    fleetIdleFraction: 0.2,
    fleetIdleFor: '15m',
    healthScoreThreshold: 0.5,
    healthScoreFor: '15m',
    // Corrected ECC errors per hour above which the health score drops.
    eccCorrectedPerHour: 100,
    // An exporter target that is down, or that served devices within this
    // lookback and is gone, hides every device alert of its node.
    exporterDownFor: '2m',
    // An attribution source down, or device-plugin IDs the exporter cannot
    // place, for this long: the same alert. Longer than exporterDownFor,
    // as the node's device alerts go on (only without owners): a kubelet
    // restarting for a node upgrade, or a pod started before its device
    // plugin re-registered, must not page (review21 F3).
    attributionDownFor: '5m',
    exporterGoneLookback: '1h',
    // How long an alert keeps firing once its condition stops holding:
    // longer than the gap of an exporter rollout (a missed scrape or two),
    // so that a rollout does not resolve every alert of the node and start
    // each one's `for` again; and longer than exporterDownFor, so that an
    // exporter that stays down has XpuExporterDown firing before the
    // node's device alerts resolve (found by probe21-alerts: with 2m and
    // 5m a lost GPU's alert resolved, and for 3 minutes nothing fired).
    keepFiringFor: '3m',

    // Device health score (see README.md): how far back an event still
    // lowers the score, and how much each input takes off a score of 1.
    healthWindow: '1h',
    healthWeights: {
      ecc: 0.6,
      remap: 0.6,
      xid: 0.3,
      pcie: 0.3,
      thermal: 0.3,
      ecc_corrected: 0.2,
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
    // The error ratio is judged only above this many requests per second:
    // one failed request out of three is not an outage.
    inferenceErrorRatio: 0.05,
    inferenceErrorMinRequestsPerSecond: 0.1,
    inferenceErrorFor: '10m',
    inferenceDownFor: '5m',

    // Usage rules (allocation, GPU-hours, cost, energy) are evaluated at a
    // fixed interval so that sum_over_time(rule[30d]) * interval / 1h turns
    // their per-hour values into totals.
    usageRulesInterval: '1m',
    // The window of the energy counter's rate in the energy rules, and of
    // the mean power that stands for it where a device has no counter or
    // its counter changed label sets (owners) within the window.
    energyRateWindow: '5m',
    // The window of the request and token rates the inference cost rules
    // record (cost per million tokens, idle engines).
    inferenceRateWindow: '5m',
    // An engine serving fewer requests per second than this over
    // inferenceRateWindow is idle: its GPUs burn without serving.
    inferenceIdleRequestsPerSecond: 0.01,
    // Grid carbon intensity in gCO2 per kWh, with per-cluster overrides
    // (cluster label value -> intensity) for fleets spread over regions.
    gridCarbonIntensity: 400,
    gridCarbonIntensityByCluster: {},
    // The cluster whose Prometheus evaluates these rules, for a Prometheus
    // that names its cluster only in global.external_labels: rule
    // evaluation never sees external labels, so the recorded series carry
    // no clusterLabel, match no gridCarbonIntensityByCluster entry and
    // would take gridCarbonIntensity. Set it when rendering each cluster's
    // rules, and series without clusterLabel take that cluster's entry.
    // Not needed when the cluster is a label of the scraped series (the
    // chart's serviceMonitor.cluster).
    clusterName: '',

    runbookURLPattern: 'https://github.com/xpu-exporter/xpu_exporter/blob/main/mixin/runbook.md#%s',

    // Grafana.
    dashboardTags: ['xpu-exporter-mixin'],
    dashboardNamePrefix: 'XPU / ',
    dashboardRefresh: '30s',
    dashboardTimezone: 'utc',
  },
}

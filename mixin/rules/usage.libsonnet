// Allocation, GPU-hours, cost, energy and CO2 per owner, and fleet
// utilization per model. Every aggregation keeps the cluster label.
//
// The allocation and chargeback groups run at a fixed interval and record
// per-hour values (devices = GPU-hours per hour, cost per hour, kWh per
// hour, gCO2 per hour), so a total over any period is
//   sum_over_time(RULE[period]) * interval / 1h
// e.g. sum_over_time(namespace:xpu_allocated_devices:sum[30d]) / 60 is the
// GPU-hours of the last 30 days at the default 1m interval.
//
// device_owner:* rules hold one series per (device, owner) pair; the
// per-namespace/workload/account rules sum them.
local util = import '../lib/util.libsonnet';

{
  local c = $._config,
  local fmt = c {
    key: util.labels(c.deviceKeyLabels),
  },

  // The levels owners are accounted at, and the matcher that keeps only
  // owners of that kind.
  local levels = [
    { name: 'namespace', labels: ['namespace'], filter: 'namespace!=""' },
    { name: 'namespace_workload', labels: ['namespace', 'workload', 'workload_kind'], filter: 'namespace!=""' },
    { name: 'slurm_account', labels: ['slurm_account'], filter: 'slurm_account!=""' },
    // A job keeps its account and user: who to bill for a training run.
    { name: 'slurm_job', labels: ['slurm_account', 'slurm_user', 'slurm_job_id'], filter: 'slurm_job_id!=""' },
  ],
  local chargebackLevels = [levels[0], levels[2], levels[3]],
  // series: a recorded series, or a raw one (with the exporter selector).
  // A raw one is weighed by its exporter's scrapes (util.perScrape).
  local sumBy(level, extra, series) = 'sum by (%s) (%s)\n' % [
    util.labels([c.clusterLabel] + level.labels + extra),
    if std.startsWith(series, 'xpu_') then util.perScrape(c, '%s{%s, %s}' % [series, c.xpuSelector, level.filter])
    else '%s{%s}' % [series, level.filter],
  ],

  // Price and energy exist per physical GPU. A MIG instance's allocation
  // already is a fraction of its GPU, so its uuid is replaced by the
  // parent's to join the GPU's price and energy; per-instance price or
  // energy series, if any, are left out so nothing counts twice.
  // An owner's compute instances of one GPU instance and profile, which
  // differ by uuid alone, are added up first (util.onGpuPerParent; a pod
  // holding two 1c.3g.40gb instances failed chargeback cluster-wide).
  // Allocations are weighed by their exporter's scrapes (util.perScrape).
  local allocated(selector) = util.perScrape(c, selector),
  local allocationOnGpu = util.onGpuPerParent('sum without (uuid)', 'xpu_workload_allocated_devices', c.xpuSelector, allocated),
  // An owner's series on one physical GPU, its instances' added up.
  local physical(expr) = 'sum without (parent_uuid, mig_instance, mig_profile, device) (\n%s\n)' % util.indent(util.onGpuKeepingDevice(expr)),
  // The owners' utilized shares summed per physical GPU.
  // The use of each device whose owners' is known, in whole GPUs: its
  // owners' utilized shares, or for a MIG instance or partition whose
  // owners have no split (time-sliced or MPS on a MIG instance, where NVML
  // gives no process its utilization) its own utilization, at most its
  // allocation. Without the latter, a GPU one of whose instances had owner
  // splits counted its shared instance 0 busy (found by probe18-nvidia:
  // allocated_busy 0.029 where (0.6 × 3 + 0.2 × 1)/7 = 0.286).
  local deviceLabels = '%(key)s, parent_uuid, node, vendor, model' % fmt,
  local ownersUse = 'sum by (%s) (device_owner:xpu_utilized_devices:ratio)' % deviceLabels,
  local instanceAllocation = 'sum by (%s) %s' % [deviceLabels, allocated('xpu_workload_allocated_devices{%s, parent_uuid!=""}' % c.xpuSelector)],
  local instanceUse = migSliceFraction('max by (%s) (%s)' % [deviceLabels, util.meanOverInterval(c, 'xpu_utilization_ratio{%s, parent_uuid!=""}' % c.xpuSelector)]),
  local usedOnDevice = |||
    %(owners)s
    or (
      %(use)s
        < %(alloc)s
      or %(alloc)s and %(use)s
    )
  ||| % { owners: ownersUse, use: util.indent(util.indent(instanceUse)), alloc: instanceAllocation },
  local usedOnGpu = util.sumOnGpu(c, usedOnDevice),

  // One price per physical GPU. Taken per device key so that labels a
  // price series might gain never make the joins below ambiguous. The
  // latest in the window of the evaluation, so that the allocations
  // weighed by scrapes (util.perScrape) keep their price when the last
  // scrape failed; the price of the moment where the window has none.
  local priceSeries = 'xpu_device_hourly_cost{%(xpuSelector)s, parent_uuid=""}' % fmt,
  local price = 'max by (%s, currency) (last_over_time(%s[%s]) or %s)' % [fmt.key, priceSeries, util.usageWindow(c), priceSeries],
  // A GPU's energy rate, summed over its counter series: a device with one
  // owner carries that owner's labels on its counter, so after an owner
  // change the old and the new series both have a rate in the window.
  // A device without an energy counter (Gaudi: hl-smi gives power only)
  // takes its mean power over the same window instead, W = J/s: the mean
  // of all its power samples, whichever owner's series holds them, so an
  // owner change neither doubles nor drops it. So does a device whose
  // counter is under more than one label set in the window (its owners
  // changed): the rates of the label sets cannot be added, as one set may
  // span another's time (owner A, none, A again: A's rate covers the
  // middle, which the owner-less series counts again; found by probing,
  // 0.36 kWh per hour for a 300 W GPU). Only a device with neither adds
  // its label sets' rates, right where its owners changed once. Each `or`
  // adds the devices the arms before it lack, so no device counts twice.
  // The counter's rate is taken only where the counter was there a window
  // ago: rate() over a series younger than its window sees part of it and
  // divides by all of it (0.086 kWh an hour 70 s after a 400 W GPU's
  // exporter started; found by probing, probe15-dash D5); the mean power
  // stands for it until then.
  local energyRate = |||
    (
      sum by (%(key)s) (rate(xpu_energy_joules_total{%(xpuSelector)s, parent_uuid=""}[%(energyRateWindow)s]))
        unless on (%(key)s) (count by (%(key)s) (count_over_time(xpu_energy_joules_total{%(xpuSelector)s, parent_uuid=""}[%(energyRateWindow)s])) > 1)
        and on (%(key)s) count by (%(key)s) (xpu_energy_joules_total{%(xpuSelector)s, parent_uuid=""} offset %(energyRateWindow)s)
      or
      sum by (%(key)s) (sum_over_time(xpu_power_watts{%(xpuSelector)s, parent_uuid=""}[%(energyRateWindow)s]))
        / sum by (%(key)s) (count_over_time(xpu_power_watts{%(xpuSelector)s, parent_uuid=""}[%(energyRateWindow)s]))
      or
      sum by (%(key)s) (rate(xpu_energy_joules_total{%(xpuSelector)s, parent_uuid=""}[%(energyRateWindow)s]))
    )
  ||| % fmt,

  // Each physical GPU's utilization (util.gpuUtilization).
  local gpuUtilization = util.gpuUtilization(c, c.xpuSelector),
  // The capacity states and the cluster's idle cost place every GPU: one
  // in MIG mode with an unread instance counts its read instances' use (a
  // lower bound), not none. The idle cost, summed over evaluations, takes
  // its mean over the interval.
  local gpuUtilizationKnownPart = util.gpuUtilization(c, c.xpuSelector, mean=true, complete=false),
  local migSliceFraction(expr) = util.partitionFraction(c, c.xpuSelector, expr),

  local co2(levelName) =
    local energy = '%s:xpu_energy_kwh_per_hour:sum' % levelName;
    local overrides = c.gridCarbonIntensityByCluster;
    local clusters = std.objectFields(overrides);
    // Series without the cluster label: the cluster the rules are
    // evaluated for (clusterName, when clusterLabel is only a Prometheus
    // external label, which rule evaluation never sees).
    local unlabelled = if std.objectHas(overrides, c.clusterName) then overrides[c.clusterName] else c.gridCarbonIntensity;
    local ownArm = clusters != [] && unlabelled != c.gridCarbonIntensity;
    {
      record: '%s:xpu_co2_grams_per_hour:sum' % levelName,
      // One arm per cluster with its own grid intensity, one for series
      // without the cluster label when clusterName has its own, the
      // default for the rest.
      expr: std.join('\nor ', [
        '%s{%s="%s"} * %g' % [energy, c.clusterLabel, cluster, overrides[cluster]]
        for cluster in clusters
      ] + (
        if ownArm then ['%s{%s=""} * %g' % [energy, c.clusterLabel, unlabelled]] else []
      ) + [
        if clusters == [] then '%s * %g' % [energy, c.gridCarbonIntensity]
        else if ownArm then '%s{%s!~"%s", %s!=""} * %g' % [energy, c.clusterLabel, util.regex(clusters), c.clusterLabel, c.gridCarbonIntensity]
        else '%s{%s!~"%s"} * %g' % [energy, c.clusterLabel, util.regex(clusters), c.gridCarbonIntensity],
      ]) + '\n',
    },

  prometheusRules+:: {
    groups+: [
      {
        name: 'xpu-allocation.rules',
        interval: c.usageRulesInterval,
        rules: [
          {
            // The fraction of a whole GPU an owner keeps busy. The per-owner
            // split of a shared GPU already is a share of the whole device.
            // On a MIG instance or an AMD compute partition the split is a
            // share of the partition, so it is scaled by the partition's
            // share of its GPU (util.partitionFraction: the compute slices
            // of a MIG instance, 1/N of a GPU in N partitions, as the
            // exporter serves them), never by the owner's allocation: on a
            // time-sliced instance that allocation already holds the
            // owner's 1/N, which the split counted once.
            // The split is averaged over the evaluation interval
            // (util.meanOverInterval) before any scaling: the sums and the
            // idle cost built on this rule add up its evaluations.
            record: 'device_owner:xpu_utilized_devices:ratio',
            expr: util.meanOverInterval(c, 'xpu_workload_utilization_ratio{%(xpuSelector)s, workload_kind!="unattributed", parent_uuid=""}' % fmt)
                  + '\nor\n'
                  + migSliceFraction(util.meanOverInterval(c, 'xpu_workload_utilization_ratio{%(xpuSelector)s, workload_kind!="unattributed", parent_uuid!=""}' % fmt)),
          },
        ] + [
          {
            // Devices allocated in whole GPUs (a time-slice replica counts
            // 1/N, a MIG instance its fraction): allocation-based GPU-hours
            // per hour.
            record: '%s:xpu_allocated_devices:sum' % level.name,
            expr: sumBy(level, [], 'xpu_workload_allocated_devices'),
          }
          for level in levels
        ] + [
          {
            // Utilization-weighted GPU-hours per hour.
            record: '%s:xpu_utilized_devices:sum' % level.name,
            expr: sumBy(level, [], 'device_owner:xpu_utilized_devices:ratio'),
          }
          for level in levels
        ] + [
          // The capacity split: every physical GPU is allocated (to any
          // owner) or not, and its allocated part busy or idle.
          {
            // 1 per physical GPU that no allocation names and whose owners
            // the exporter says it does not know (xpu_device_owners left
            // out while attribution is on: a pod holds an ID in no known
            // form, the process list is refused, a source is down): it
            // may be held, so it is not counted free. Of a GPU in MIG mode
            // one of whose instances is allocated, the share of each
            // instance that no allocation names and whose owners are
            // unknown: the GPU's allocation made all of it known, and such
            // an instance was counted free (found by probe18-nvidia: 4/7
            // unallocated where 3/7 were of unknown owners).
            record: 'device:xpu_owners_unknown_devices:sum',
            expr: |||
              group by (%(key)s, node, vendor, model) (xpu_device_info{%(xpuSelector)s, parent_uuid=""})
                unless on (%(key)s) xpu_device_owners{%(xpuSelector)s}
                unless on (%(key)s) %(allocationOnGpu)s
                and on (%(scrape)s) group by (%(scrape)s) (xpu_attribution_source_up{%(xpuSelector)s})
              or
              %(unknownParts)s
                and on (%(key)s) %(allocationOnGpu)s
            ||| % (fmt {
                     allocationOnGpu: util.indent(allocationOnGpu),
                     scrape: util.labels([c.clusterLabel, 'job', 'instance']),
                     unknownParts: util.indent(util.sumOnGpu(c, |||
                       max by (%(key)s, parent_uuid, node, vendor, model) (xpu_partition_share_ratio{%(xpuSelector)s, parent_uuid!=""})
                         unless on (%(key)s) xpu_device_owners{%(xpuSelector)s}
                         unless on (%(key)s) xpu_workload_allocated_devices{%(xpuSelector)s}
                         and on (%(scrape)s) group by (%(scrape)s) (xpu_attribution_source_up{%(xpuSelector)s})
                     ||| % (fmt { scrape: util.labels([c.clusterLabel, 'job', 'instance']) }))),
                   }),
          },
          {
            // Per physical GPU, the allocations of all its owners and MIG
            // instances, 0 for a GPU nobody holds (not one whose owners are
            // unknown). Not capped: more than 1 is a GPU handed out twice.
            // The device rules keep node (a target label, one per device
            // key, so no more series) for the dashboards' Node variable.
            record: 'device:xpu_allocated_devices:sum',
            expr: |||
              sum by (%(key)s, node, vendor, model) (
              %(allocationOnGpu)s)
              or 0 * (
                group by (%(key)s, node, vendor, model) (xpu_device_info{%(xpuSelector)s, parent_uuid=""})
                  unless on (%(key)s) device:xpu_owners_unknown_devices:sum
              )
            ||| % (fmt { allocationOnGpu: util.indent(allocationOnGpu) }),
          },
          {
            // Per physical GPU, the owners' utilized shares, at most what
            // is allocated (a time-slice replica may use more than its
            // 1/N). Where no owner's share is known (the exporter leaves
            // the split out: a Gaudi shared by several parties) the
            // GPU's own utilization stands for it, at most the allocation:
            // a 40 % busy GPU is not "allocated idle" for want of a split.
            // 0 for a GPU without a utilization reading (down); for a GPU
            // in MIG mode one of whose instances has none, its read
            // instances' use, so that the states still add up to the
            // devices.
            record: 'device:xpu_utilized_devices:sum',
            expr: |||
              (
                %(used)s
                  < device:xpu_allocated_devices:sum
              )
              or (device:xpu_allocated_devices:sum and %(used)s)
              or (
                device:xpu_allocated_devices:sum
                  and on (%(key)s)
                (%(gpu)s) >= on (%(key)s) device:xpu_allocated_devices:sum
              )
              or (0 * device:xpu_allocated_devices:sum + on (%(key)s) group_left () (%(gpu)s))
              or 0 * device:xpu_allocated_devices:sum
            ||| % (fmt { used: usedOnGpu, gpu: util.indent(util.indent(gpuUtilizationKnownPart)) }),
          },
          {
            record: 'model_state:xpu_devices:sum',
            labels: { state: 'unallocated' },
            // Less, on a GPU in MIG mode, its instances of unknown owners.
            expr: |||
              sum by (%(clusterLabel)s, vendor, model) (
                1 - device:xpu_allocated_devices:sum - on (%(key)s) group_left () device:xpu_owners_unknown_devices:sum
                or 1 - device:xpu_allocated_devices:sum
              )
            ||| % fmt,
          },
          {
            record: 'model_state:xpu_devices:sum',
            labels: { state: 'allocated_idle' },
            expr: |||
              sum by (%(clusterLabel)s, vendor, model) (device:xpu_allocated_devices:sum - device:xpu_utilized_devices:sum)
            ||| % fmt,
          },
          {
            record: 'model_state:xpu_devices:sum',
            labels: { state: 'owners_unknown' },
            expr: |||
              sum by (%(clusterLabel)s, vendor, model) (device:xpu_owners_unknown_devices:sum)
            ||| % fmt,
          },
          {
            record: 'model_state:xpu_devices:sum',
            labels: { state: 'allocated_busy' },
            expr: |||
              sum by (%(clusterLabel)s, vendor, model) (device:xpu_utilized_devices:sum)
            ||| % fmt,
          },
          {
            // The part of that cost the owner leaves unused, per owner and
            // physical GPU: a GPU in MIG mode allocated whole (the device
            // plugin's migStrategy none) holds its allocation on the GPU and
            // its use on the instances, so both are taken to the GPU before
            // they are compared. An owner whose utilization is unknown (the
            // exporter leaves its split out: a Gaudi shared by several
            // parties, a time-sliced MIG instance) has no idle cost, rather
            // than all of it: unknown is not unused.
            // In this group, after the use it reads: Prometheus runs one
            // group's rules in order at one evaluation time and orders
            // nothing between groups. Read from another group, the use
            // was that group's previous evaluation's, none for an owner
            // that had just appeared, whose idle cost was lost for an
            // interval at every pod start or move (found by probing;
            // TestRecordingRulesReadTheirOwnGroup).
            record: 'device_owner:xpu_idle_cost_per_hour:mul',
            // An allocation on a MIG instance or partition counts where
            // its own use is known; one on a whole GPU always, weighed
            // against the GPU's use or its instances'. The containers of
            // one pod are one tenant: their allocations and uses on a
            // device are added before the one is set against the other,
            // and the pod's idle part is split between them by
            // allocation. Compared per container, a sidecar's half of
            // the GPU the working container keeps 90 % busy was all idle
            // (found by probe18-multigpu: 2 USD/h where (1 - 0.9) x 4 =
            // 0.4). A pod one of whose containers' use is unknown has
            // none.
            expr: |||
              (
                %(alloc)s
                  / ignoring (container) group_left ()
                  (sum without (container) (%(alloc)s) > 0)
                or
                %(alloc)s * 0
              )
              * ignoring (container) group_left ()
              clamp_min(
                sum without (container) (%(alloc)s)
                  -
                (
                  sum without (container) (%(used)s and %(alloc)s)
                    unless ignoring (container)
                  (%(alloc)s unless %(used)s)
                ),
                0
              )
              * on (%(key)s) group_left (currency)
              %(price)s
            ||| % (fmt {
                     price: price,
                     alloc: physical(
                       allocated('xpu_workload_allocated_devices{%(xpuSelector)s, parent_uuid!=""}' % c)
                       + ' and device_owner:xpu_utilized_devices:ratio\nor '
                       + allocated('xpu_workload_allocated_devices{%(xpuSelector)s, parent_uuid=""}' % c)
                     ),
                     used: physical('device_owner:xpu_utilized_devices:ratio'),
                   }),
          },
        ] + [
          {
            record: '%s:xpu_idle_cost_per_hour:sum' % level.name,
            expr: sumBy(level, ['currency'], 'device_owner:xpu_idle_cost_per_hour:mul'),
          }
          for level in chargebackLevels
        ],
      },
      {
        name: 'xpu-chargeback.rules',
        interval: c.usageRulesInterval,
        rules: [
          {
            // Chargeback: each owner pays for its allocation, used or not.
            record: 'device_owner:xpu_cost_per_hour:mul',
            expr: allocationOnGpu + |||
              * on (%(key)s) group_left (currency)
              %(price)s
            ||| % (fmt { price: price }),
          },
          {
            // Energy is split like cost: an owner answers for the idle power
            // of the devices it holds. J/s / 1000 = kWh per hour.
            record: 'device_owner:xpu_energy_kwh_per_hour:mul',
            expr: allocationOnGpu + |||
              * on (%(key)s) group_left ()
              %(energyRate)s / 1000
            ||| % (fmt { energyRate: energyRate }),
          },
          {
            // Each price weighed by its exporter's scrapes, as allocations.
            record: 'cluster:xpu_cost_per_hour:sum',
            expr: |||
              sum by (%(clusterLabel)s, currency) (max by (%(key)s, currency) %(price)s)
            ||| % (fmt { price: util.perScrape(c, priceSeries) }),
          },
          {
            // What the unused part of every device costs, allocated or not.
            record: 'cluster:xpu_idle_cost_per_hour:sum',
            expr: |||
              sum by (%(clusterLabel)s, currency) (
                %(price)s
                  * on (%(key)s) group_left ()
                  clamp_min(1 - (
            ||| % (fmt { price: price }) + util.indent(util.indent(util.indent(
              // A device that is down or has no reading is wholly idle. A
              // GPU in MIG mode counts its read instances' use only: an
              // instance without a reading adds its slice of the price
              // as idle. Left out, such a GPU added nothing, as if fully
              // used, where every MIG GPU without GPM or DCGM has unread
              // instances (probe F PF2: 2.78 USD/h where 6.44 at least).
              gpuUtilizationKnownPart + '\nor 0 * max by (%(key)s) (xpu_device_hourly_cost{%(xpuSelector)s, parent_uuid=""})' % fmt
            ))) + '\n    ), 0)\n)\n',
          },
          {
            // Each device's energy rate weighed by the part of its
            // exporter's scrapes in the evaluation's window that it
            // answered in (util.perScrape of xpu_device_up): the rate reads
            // the last energyRateWindow, so a replaced node's devices, or a
            // GPU lost (its xpu_device_up 0, without uuid), counted on for
            // that long (probe F PF9: 2.95 kWh/h where the 6 GPUs present
            // drew 1.8). A failed scrape is left out of the weight, as it is
            // of the owners' allocations.
            record: 'cluster:xpu_energy_kwh_per_hour:sum',
            expr: |||
              sum by (%(clusterLabel)s) (
              %(energyRate)s
                  * on (%(key)s)
                %(present)s
              ) / 1000
            ||| % (fmt {
                     energyRate: util.indent(energyRate),
                     present: 'sum by (%s) %s' % [fmt.key, std.lstripChars(util.indent(util.perScrape(c, 'xpu_device_up{%(xpuSelector)s, parent_uuid=""}' % c)), ' ')],
                   }),
          },
        ] + std.flattenArrays([
          [
            {
              record: '%s:xpu_cost_per_hour:sum' % level.name,
              expr: sumBy(level, ['currency'], 'device_owner:xpu_cost_per_hour:mul'),
            },
            {
              record: '%s:xpu_energy_kwh_per_hour:sum' % level.name,
              expr: sumBy(level, [], 'device_owner:xpu_energy_kwh_per_hour:mul'),
            },
          ]
          for level in chargebackLevels
        ]) + [
          co2(levelName)
          for levelName in ['cluster'] + [level.name for level in chargebackLevels]
        ],
      },
      {
        name: 'xpu-fleet.rules',
        rules: [
          {
            // Whole GPUs, those in MIG mode through their instances; a MIG
            // instance's own utilization is relative to the instance.
            record: 'model:xpu_utilization:avg',
            expr: 'avg by (%(clusterLabel)s, vendor, model) (\n' % fmt + util.indent(
              '(\n%s\n)\n' % util.indent(gpuUtilization)
              + '* on (%(key)s) group_left (vendor, model)\ngroup by (%(key)s, vendor, model) (xpu_device_info{%(xpuSelector)s, parent_uuid=""})' % fmt
            ) + '\n)\n',
          },
          {
            // Physical devices only: MIG instances are part of their GPU.
            record: 'model:xpu_devices:count',
            expr: |||
              count by (%(clusterLabel)s, vendor, model) (xpu_device_info{%(xpuSelector)s, parent_uuid=""})
            ||| % fmt,
          },
        ],
      },
    ],
  },
}

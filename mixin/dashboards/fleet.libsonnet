// Fleet overview: capacity, use and health across clusters.
local g = import '../lib/grafana.libsonnet';
local util = import '../lib/util.libsonnet';
local common = import 'common.libsonnet';

{
  local c = $._config,
  local d = common(c),
  // Capacity is counted per device, whoever owns it: no owner variable.
  local s = d.deviceNodeSelector,
  local byCluster = 'by (%s)' % c.clusterLabel,
  local physical = 'xpu_device_info{%s, parent_uuid=""}' % s,
  // Each physical GPU's utilization, as the recording rules take it
  // (util.gpuUtilization): a GPU in MIG mode by its instances weighted by
  // their slices, a GPU in AMD compute partitions by its own, so that a GPU
  // counts once, as in "Utilization by model".
  local gpuUtil = '(\n%s\n)' % util.indent(util.gpuUtilization(c, s)),
  local key = util.labels(c.deviceKeyLabels),
  // The capacity split of model_state:xpu_devices:sum, from the per-device
  // rules it sums, which keep node and vendor: the split of the selected
  // nodes and vendors.
  local devices = '%s, node=~"$node", %s' % [d.cluster, d.vendor],
  local capacity = [
    'sum(1 - device:xpu_allocated_devices:sum{%s})' % devices,
    'sum(device:xpu_allocated_devices:sum{%s} - device:xpu_utilized_devices:sum{%s})' % [devices, devices],
    'sum(device:xpu_utilized_devices:sum{%s})' % devices,
    'sum(device:xpu_owners_unknown_devices:sum{%s})' % devices,
  ],
  local states = ['unallocated', 'allocated_idle', 'allocated_busy', 'owners_unknown'],

  grafanaDashboards+:: {
    'xpu-fleet-overview.json': g.dashboard(
      c,
      'xpu-fleet-overview',
      'Fleet overview',
      'Devices, utilization, allocation, power, cost and health of every cluster.',
      d.variables,
      [
        g.row('Fleet'),
        g.stat('Devices', 'Physical devices (MIG instances count as part of their GPU).', [
          g.target('count(%s)' % physical, instant=true),
        ]) + g.size(4, 4),
        g.stat('Devices down', 'Physical devices that stopped answering the driver (xpu_device_up = 0), e.g. fell off the bus, or one of whose MIG instances did; a GPU counts once, with its instances or partitions.', [
          g.target('count(%s == 0) or vector(0)' % util.minOnGpu(c, 'xpu_device_up', s), instant=true),
        ]) + g.size(4, 4),
        g.stat('Utilization', 'Mean utilization of the physical devices (a GPU in MIG mode by its instances, weighted by their slices).', [
          g.target('avg(%s)' % gpuUtil, instant=true),
        ], unit='percentunit') + g.size(4, 4),
        g.stat('Allocated', 'Share of the physical devices allocated to a pod, Slurm job or process.', [
          g.target('sum(xpu_workload_allocated_devices{%s}) / count(%s)' % [s, physical], instant=true),
        ], unit='percentunit') + g.size(4, 4),
        g.stat('Idle', 'Share of the physical devices below %s utilization, allocated or not.' % util.percent(c.idleUtilizationThreshold), [
          g.target('(count(%(u)s < %(t)g) or vector(0)) / count(%(u)s)' % { u: gpuUtil, t: c.idleUtilizationThreshold }, instant=true),
        ], unit='percentunit') + g.size(4, 4),
        g.stat('Cost per hour', 'What the selected devices cost per hour, from the prices configured in the exporter (xpu_device_hourly_cost), one price per physical GPU. Shows "no price configured" when the exporter has no price, and beside the cost the devices of models the price table lacks (xpu_cost_unpriced_devices), which the cost leaves out.', [
          // Range queries, each reduced to its last value: two instant
          // (table) queries would show as "Value #A" and "Value #B".
          g.target('sum by (currency) (max by (%s, currency) (xpu_device_hourly_cost{%s, parent_uuid=""}))' % [key, s], '{{currency}}'),
          g.target('sum(xpu_cost_unpriced_devices{%s}) > 0' % s, 'devices unpriced'),
        ], noValue='no price configured') + g.size(4, 4),

        g.row('Clusters'),
        g.table('Clusters', 'One row per cluster.', [
          g.target('count %s (%s)' % [byCluster, physical], instant=true),
          g.target('avg %s %s' % [byCluster, gpuUtil], instant=true),
          g.target('sum %s (xpu_workload_allocated_devices{%s})' % [byCluster, s], instant=true),
          g.target('sum %s (xpu_power_watts{%s})' % [byCluster, s], instant=true),
          // The selected devices' power at the cluster's grid intensity,
          // which the CO2 rule over the energy rule gives (per-cluster
          // overrides included); the rules alone are the whole cluster.
          g.target('sum %s (xpu_power_watts{%s}) / 1000\n  * on (%s) group_left ()\n  (cluster:xpu_co2_grams_per_hour:sum{%s} / cluster:xpu_energy_kwh_per_hour:sum{%s})' % [byCluster, s, c.clusterLabel, d.cluster, d.cluster], instant=true),
        ], [
          { name: 'Devices', unit: 'short' },
          { name: 'Utilization', unit: 'percentunit' },
          { name: 'Allocated devices', unit: 'short' },
          { name: 'Power', unit: 'watt' },
          { name: 'CO2 per hour', unit: 'massg' },
        ]) + g.size(24, 6),
        g.timeseries('Utilization by cluster', 'Mean utilization of the physical devices.', [
          g.target('avg %s %s' % [byCluster, gpuUtil], '{{%s}}' % c.clusterLabel),
        ], unit='percentunit', min=0, max=1),
        g.timeseries('Capacity, allocation and use', 'Physical devices, devices allocated to owners, and devices worth of utilization (GPU-hours per hour).', [
          g.target('count(%s)' % physical, 'devices'),
          g.target('sum(xpu_workload_allocated_devices{%s})' % s, 'allocated'),
          g.target('sum(device_owner:xpu_utilized_devices:ratio{%s})' % s, 'utilized'),
        ], min=0),

        g.row('Capacity'),
        g.timeseries('Capacity by state', 'Physical devices split into unallocated, allocated but idle (the allocated part not utilized), allocated and busy, and owners unknown (no allocation names them and the exporter cannot tell who holds them: see xpu_attribution_unknown_device_ids): whether utilization is low because devices sit unallocated or because their owners leave them idle. The selected nodes and vendors, from the per-device rules model_state:xpu_devices:sum adds up.', [
          g.target(capacity[i], states[i])
          for i in std.range(0, std.length(states) - 1)
        ], stack=true, min=0) + g.size(24),

        // Per-model inventory from the model rules: one series per model
        // and cluster, cheap over months at any fleet size, and without
        // node, so cluster-wide and said to be.
        g.row('Models (cluster-wide)'),
        g.table('Capacity by model and state', 'Cluster-wide: ignores the Node variable. The capacity split per cluster, vendor and model, in devices (model_state:xpu_devices:sum).', [
          g.target('model_state:xpu_devices:sum{%s}' % d.clusterVendor, instant=true),
        ], [{ name: 'Devices', unit: 'short' }]),
        g.table('Devices by model', 'Cluster-wide: ignores the Node variable. Physical devices and mean utilization per vendor and model.', [
          g.target('model:xpu_devices:count{%s}' % d.clusterVendor, instant=true),
          g.target('model:xpu_utilization:avg{%s}' % d.clusterVendor, instant=true),
        ], [
          { name: 'Devices', unit: 'short' },
          { name: 'Utilization', unit: 'percentunit' },
        ]),
        g.timeseries('Utilization by model', 'Cluster-wide: ignores the Node variable. Mean device utilization per model.', [
          g.target('model:xpu_utilization:avg{%s}' % d.clusterVendor, '{{%s}} {{model}}' % c.clusterLabel),
        ], unit='percentunit', min=0, max=1) + g.size(24),

        g.row('Power and health'),
        g.timeseries('Power by cluster', 'Power drawn by the devices.', [
          g.target('sum %s (xpu_power_watts{%s})' % [byCluster, s], '{{%s}}' % c.clusterLabel),
        ], unit='watt', min=0),
        g.table('Devices with a lowered health score', 'Devices scoring below 1; the XPU / Health & reliability dashboard shows why.', [
          g.target('device:xpu_health_score:clamp_min{%s} < 1' % s, instant=true),
        ], [{ name: 'Health score', unit: 'percentunit' }]),
      ]
    ),
  },
}

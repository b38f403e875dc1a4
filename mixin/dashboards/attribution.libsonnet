// Workload attribution and chargeback: who holds the devices, how much of
// them they use, and what that costs, per Kubernetes namespace, workload
// and pod and per Slurm account, user and job.
local g = import '../lib/grafana.libsonnet';
local util = import '../lib/util.libsonnet';
local common = import 'common.libsonnet';

{
  local c = $._config,
  local d = common(c),
  local s = d.deviceOwnerSelector,
  // Slurm jobs have no namespace: their panels ignore that variable.
  local slurm = d.deviceNodeSelector,
  local ns = '%s, namespace=~"$namespace"' % d.cluster,
  local noPrice = 'no price configured',
  local costNote = ' Cost comes from the prices configured in the exporter (xpu_device_hourly_cost); without one this panel says "%s" rather than showing a cost of zero.' % noPrice,
  local gpuHours = ' GPU-hours count whole GPUs: a time-slice replica 1/N, a MIG instance its fraction of the GPU.',
  // Totals over the time range read the per-cluster and per-team rules,
  // which sum a month in one series per team; they keep no node or vendor
  // (a team's devices on every node add up to its bill), so those panels
  // say they are cluster-wide rather than seem to follow the variables.
  // Panels of the present read the per-device series, which follow them.
  local clusterWide = 'Cluster-wide: ignores the Node and Vendor variables. ',
  // Allow-listed pod labels are joined from xpu_workload_info, the only
  // series that carries them.
  local pods = std.join(', ', [c.clusterLabel, 'node'] + c.ownerLabels.kubernetes),
  local perPod(expr) = util.withPodLabels(c, expr),
  local jobs = std.join(', ', [c.clusterLabel, 'node'] + c.ownerLabels.slurm),

  grafanaDashboards+:: {
    'xpu-attribution.json': g.dashboard(
      c,
      'xpu-attribution',
      'Workload attribution & chargeback',
      'Devices allocated and used, GPU-hours, cost, energy and CO2 per namespace, workload, pod, Slurm account, user and job.',
      d.variables + d.ownerVariables,
      [
        g.row('Totals over the time range (cluster-wide)'),
        g.stat('Cost', clusterWide + 'What all devices cost over the time range.' + costNote, [
          g.target('sum by (currency) (%s)' % d.overRange('cluster:xpu_cost_per_hour:sum{%s}' % d.cluster), '{{currency}}', instant=true),
        ], noValue=noPrice) + g.size(6, 4),
        g.stat('Idle cost', clusterWide + 'The part of that cost spent on unused device capacity.' + costNote, [
          g.target('sum by (currency) (%s)' % d.overRange('cluster:xpu_idle_cost_per_hour:sum{%s}' % d.cluster), '{{currency}}', instant=true),
        ], noValue=noPrice) + g.size(6, 4),
        g.stat('Energy', clusterWide + 'Energy drawn by the devices over the time range.', [
          g.target('sum(%s)' % d.overRange('cluster:xpu_energy_kwh_per_hour:sum{%s}' % d.cluster), instant=true),
        ], unit='kwatth') + g.size(6, 4),
        g.stat('CO2', clusterWide + 'Emissions of that energy at the configured grid carbon intensity.', [
          g.target('sum(%s)' % d.overRange('cluster:xpu_co2_grams_per_hour:sum{%s}' % d.cluster), instant=true),
        ], unit='massg') + g.size(6, 4),

        g.row('Teams'),
        g.table('Teams by GPU-hours over the time range', clusterWide + 'Namespaces and Slurm accounts (accounts ignore the Namespace variable too), most GPU-hours allocated first, with the GPU-hours they kept busy.' + gpuHours, [
          g.target('sort_desc(%s or %s)' % [d.overRange('namespace:xpu_allocated_devices:sum{%s}' % ns), d.overRange('slurm_account:xpu_allocated_devices:sum{%s}' % d.cluster)], instant=true),
          g.target('%s or %s' % [d.overRange('namespace:xpu_utilized_devices:sum{%s}' % ns), d.overRange('slurm_account:xpu_utilized_devices:sum{%s}' % d.cluster)], instant=true),
        ], [
          { name: 'GPU-hours allocated', unit: 'short' },
          { name: 'GPU-hours used', unit: 'short' },
        ]),
        g.timeseries('Top owners by utilized GPUs', "The five pods, Slurm jobs or units keeping the most GPUs busy (whole GPUs' worth): the owner behind a node's utilization spike.", [
          g.target('topk(5, sum by (%s, node, namespace, pod, slurm_job_id, unit) (device_owner:xpu_utilized_devices:ratio{%s}))' % [c.clusterLabel, s], '{{node}} {{namespace}}/{{pod}}{{slurm_job_id}}{{unit}}'),
        ], min=0),

        g.row('Kubernetes'),
        g.timeseries('Allocated GPUs by namespace', 'Devices allocated to the pods of each namespace (namespace:xpu_allocated_devices:sum on the selected nodes and vendors).' + gpuHours, [
          g.target('sum by (%s, namespace) (xpu_workload_allocated_devices{%s, namespace!=""})' % [c.clusterLabel, s], '{{namespace}}'),
        ], stack=true, min=0),
        g.timeseries('Utilized GPUs by namespace', 'Devices worth of utilization, from the per-owner split on shared devices (namespace:xpu_utilized_devices:sum on the selected nodes and vendors).', [
          g.target('sum by (%s, namespace) (device_owner:xpu_utilized_devices:ratio{%s, namespace!=""})' % [c.clusterLabel, s], '{{namespace}}'),
        ], stack=true, min=0),
        // Efficiency is not capped at the allocation: time-slicing lets a
        // replica's owner use more than its 1/N while its co-tenants idle,
        // and that is use to see, not to hide (the capacity rules cap,
        // because their states must add up to the physical devices).
        g.table('Namespaces over the time range', clusterWide + "GPU-hours allocated and utilized, their ratio (Efficiency), energy and CO2. Efficiency exceeds 100% for a namespace on time-sliced GPUs that uses more than its replicas' 1/N share while its co-tenants idle; Capacity by state caps the same use at the allocation." + gpuHours, [
          g.target(d.overRange('namespace:xpu_allocated_devices:sum{%s}' % ns), instant=true),
          g.target(d.overRange('namespace:xpu_utilized_devices:sum{%s}' % ns), instant=true),
          g.target('sum_over_time(namespace:xpu_utilized_devices:sum{%(ns)s}[$__range]) / sum_over_time(namespace:xpu_allocated_devices:sum{%(ns)s}[$__range])' % { ns: ns }, instant=true),
          g.target(d.overRange('namespace:xpu_energy_kwh_per_hour:sum{%s}' % ns), instant=true),
          g.target(d.overRange('namespace:xpu_co2_grams_per_hour:sum{%s}' % ns), instant=true),
        ], [
          { name: 'GPU-hours allocated', unit: 'short' },
          { name: 'GPU-hours utilized', unit: 'short' },
          { name: 'Efficiency', unit: 'percentunit' },
          { name: 'Energy', unit: 'kwatth' },
          { name: 'CO2', unit: 'massg' },
        ]) + g.size(24),
        g.table('Workloads over the time range', clusterWide + 'GPU-hours per Deployment, StatefulSet, Job or other owning workload.' + gpuHours, [
          g.target(d.overRange('namespace_workload:xpu_allocated_devices:sum{%s}' % ns), instant=true),
          g.target(d.overRange('namespace_workload:xpu_utilized_devices:sum{%s}' % ns), instant=true),
        ], [
          { name: 'GPU-hours allocated', unit: 'short' },
          { name: 'GPU-hours utilized', unit: 'short' },
        ]),
        g.table('Pods now', 'Devices each container holds now, how much of them it uses, and its device memory.', [
          g.target(perPod('sum by (%s) (xpu_workload_allocated_devices{%s, pod!=""})' % [pods, s]), instant=true),
          g.target(perPod('sum by (%s) (device_owner:xpu_utilized_devices:ratio{%s, pod!=""})' % [pods, s]), instant=true),
          g.target(perPod('sum by (%s) (xpu_workload_memory_used_bytes{%s, pod!=""})' % [pods, s]), instant=true),
        ], [
          { name: 'Allocated GPUs', unit: 'short' },
          { name: 'Utilized GPUs', unit: 'short' },
          { name: 'Memory used', unit: 'bytes' },
        ]),

        g.row('Slurm'),
        g.timeseries('Allocated GPUs by account', 'Devices allocated to the jobs of each Slurm account (slurm_account:xpu_allocated_devices:sum on the selected nodes and vendors).' + gpuHours, [
          g.target('sum by (%s, slurm_account) (xpu_workload_allocated_devices{%s, slurm_account!=""})' % [c.clusterLabel, slurm], '{{slurm_account}}'),
        ], stack=true, min=0),
        g.table('Accounts over the time range', clusterWide + 'GPU-hours allocated and utilized, energy and CO2 per Slurm account.' + gpuHours, [
          g.target(d.overRange('slurm_account:xpu_allocated_devices:sum{%s}' % d.cluster), instant=true),
          g.target(d.overRange('slurm_account:xpu_utilized_devices:sum{%s}' % d.cluster), instant=true),
          g.target(d.overRange('slurm_account:xpu_energy_kwh_per_hour:sum{%s}' % d.cluster), instant=true),
          g.target(d.overRange('slurm_account:xpu_co2_grams_per_hour:sum{%s}' % d.cluster), instant=true),
        ], [
          { name: 'GPU-hours allocated', unit: 'short' },
          { name: 'GPU-hours utilized', unit: 'short' },
          { name: 'Energy', unit: 'kwatth' },
          { name: 'CO2', unit: 'massg' },
        ]),
        g.table('Slurm jobs over the time range', clusterWide + 'What to bill each job (a training run) to its account: GPU-hours allocated and used, energy, CO2, cost and the part of the cost left unused.' + gpuHours + costNote, [
          g.target(d.overRange('slurm_job:xpu_allocated_devices:sum{%s}' % d.cluster), instant=true),
          g.target(d.overRange('slurm_job:xpu_utilized_devices:sum{%s}' % d.cluster), instant=true),
          g.target(d.overRange('slurm_job:xpu_energy_kwh_per_hour:sum{%s}' % d.cluster), instant=true),
          g.target(d.overRange('slurm_job:xpu_co2_grams_per_hour:sum{%s}' % d.cluster), instant=true),
          g.target(d.overRange('slurm_job:xpu_cost_per_hour:sum{%s}' % d.cluster), instant=true),
          g.target(d.overRange('slurm_job:xpu_idle_cost_per_hour:sum{%s}' % d.cluster), instant=true),
        ], [
          { name: 'GPU-hours allocated', unit: 'short' },
          { name: 'GPU-hours used', unit: 'short' },
          { name: 'Energy', unit: 'kwatth' },
          { name: 'CO2', unit: 'massg' },
          { name: 'Cost', unit: 'short' },
          { name: 'Idle cost', unit: 'short' },
        ], noValue=noPrice) + g.size(24),
        g.table('Users now', 'Devices each Slurm user holds now and how much of them they use.', [
          g.target('sum by (%s, slurm_account, slurm_user) (xpu_workload_allocated_devices{%s, slurm_user!=""})' % [c.clusterLabel, slurm], instant=true),
          g.target('sum by (%s, slurm_account, slurm_user) (device_owner:xpu_utilized_devices:ratio{%s, slurm_user!=""})' % [c.clusterLabel, slurm], instant=true),
        ], [
          { name: 'Allocated GPUs', unit: 'short' },
          { name: 'Utilized GPUs', unit: 'short' },
        ]),
        g.table('Jobs now', 'Devices each Slurm job holds now and how much of them it uses.', [
          g.target('sum by (%s) (xpu_workload_allocated_devices{%s, slurm_job_id!=""})' % [jobs, slurm], instant=true),
          g.target('sum by (%s) (device_owner:xpu_utilized_devices:ratio{%s, slurm_job_id!=""})' % [jobs, slurm], instant=true),
        ], [
          { name: 'Allocated GPUs', unit: 'short' },
          { name: 'Utilized GPUs', unit: 'short' },
        ]),

        g.row('Cost'),
        g.timeseries('Cost per hour by namespace', 'What each namespace pays per hour for its allocations (namespace:xpu_cost_per_hour:sum on the selected nodes and vendors).' + costNote, [
          g.target('sum by (%s, namespace, currency) (device_owner:xpu_cost_per_hour:mul{%s, namespace!=""})' % [c.clusterLabel, s], '{{namespace}} ({{currency}})'),
        ], stack=true, min=0, noValue=noPrice),
        g.table('Cost by namespace over the time range', clusterWide + 'Allocation cost and the part of it left unused.' + costNote, [
          g.target(d.overRange('namespace:xpu_cost_per_hour:sum{%s}' % ns), instant=true),
          g.target(d.overRange('namespace:xpu_idle_cost_per_hour:sum{%s}' % ns), instant=true),
        ], [
          { name: 'Cost', unit: 'short' },
          { name: 'Idle cost', unit: 'short' },
        ], noValue=noPrice),
        g.table('Cost by Slurm account over the time range', clusterWide + 'Allocation cost and the part of it left unused.' + costNote, [
          g.target(d.overRange('slurm_account:xpu_cost_per_hour:sum{%s}' % d.cluster), instant=true),
          g.target(d.overRange('slurm_account:xpu_idle_cost_per_hour:sum{%s}' % d.cluster), instant=true),
        ], [
          { name: 'Cost', unit: 'short' },
          { name: 'Idle cost', unit: 'short' },
        ], noValue=noPrice),
        g.table('Cost by pod now', 'What each pod pays per hour for its allocation now.' + costNote, [
          g.target(perPod('sum by (%s, currency) (device_owner:xpu_cost_per_hour:mul{%s, pod!=""})' % [pods, s]), instant=true),
        ], [{ name: 'Cost per hour', unit: 'short' }], noValue=noPrice),
      ]
    ),
  },
}

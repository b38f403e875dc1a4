// What every dashboard shares: the variables and the matchers that apply
// them.
local g = import '../lib/grafana.libsonnet';
local util = import '../lib/util.libsonnet';

function(c) {
  local cluster = '%s=~"$cluster"' % c.clusterLabel,

  // Cluster-level recording rules only know the cluster.
  cluster: cluster,
  // Series from the exporter, by node (self-metrics, Slurm owners).
  nodeSelector: '%s, %s, node=~"$node"' % [c.xpuSelector, cluster],
  // Device, owner and engine series from the exporter.
  selector: self.nodeSelector + ', namespace=~"$namespace"',

  // Legends name the device and, when it has one owner, the owner.
  deviceLegend: '{{node}} gpu{{gpu}} {{namespace}}/{{pod}}{{slurm_job_id}}{{unit}}',

  // Per-hour recording rules summed over the dashboard's time range.
  // The rules are evaluated every usageRulesInterval, so the sum over the
  // range divided by the evaluations per hour is the total.
  overRange(selector):: 'sum_over_time(%s[$__range]) / %g' % [selector, 3600 / util.seconds(c.usageRulesInterval)],

  variables: [
    g.datasourceVariable(),
    g.queryVariable('cluster', 'Cluster', 'label_values(xpu_device_up{%s}, %s)' % [c.xpuSelector, c.clusterLabel], hide=!c.showMultiCluster),
    g.queryVariable('node', 'Node', 'label_values(xpu_device_up{%s, %s}, node)' % [c.xpuSelector, cluster]),
    g.queryVariable('namespace', 'Namespace', 'label_values(xpu_workload_allocated_devices{%s, %s, node=~"$node"}, namespace)' % [c.xpuSelector, cluster]),
  ],
}

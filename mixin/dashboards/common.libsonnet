// What every dashboard shares: the variables and the matchers that apply
// them.
local g = import '../lib/grafana.libsonnet';
local util = import '../lib/util.libsonnet';

function(c) {
  local cluster = '%s=~"$cluster"' % c.clusterLabel,

  // Cluster-level recording rules only know the cluster.
  cluster: cluster,
  // Every device series carries its vendor (nvidia, amd, habana), as do the
  // per-device and per-model rules; series of no device (the exporter's
  // own, owners, engines) have none and are never filtered by it.
  vendor: 'vendor=~"$vendor"',
  // Model-level recording rules know the cluster and the vendor.
  clusterVendor: '%s, %s' % [cluster, self.vendor],
  // Series from the exporter, by node (self-metrics, Slurm owners, and
  // xpu_device_info and xpu_device_hourly_cost, which never carry owner
  // labels).
  nodeSelector: '%s, %s, node=~"$node"' % [c.xpuSelector, cluster],
  // Device series by node, whoever owns the device.
  deviceNodeSelector: '%s, %s' % [self.nodeSelector, self.vendor],
  // Device series picked by the gpu variable, whoever owns the device.
  deviceSelector: self.deviceNodeSelector + ', gpu=~"$gpu"',
  // Owner and engine series of the picked owners. Only a device with one
  // owner carries owner labels: once a namespace, workload or pod is
  // picked, shared devices drop out here and show in xpu_workload_*.
  selector: self.nodeSelector + ', namespace=~"$namespace", workload=~"$workload", pod=~"$pod"',
  // The same for device series (xpu_workload_*, device_owner:* rules).
  deviceOwnerSelector: '%s, %s' % [self.selector, self.vendor],
  // The same for device series, picked by the gpu variable too.
  ownerDeviceSelector: self.deviceOwnerSelector + ', gpu=~"$gpu"',

  // Legends name the device and, when it has one owner, the owner. NVIDIA,
  // AMD and Gaudi each number their devices from 0, so on a node with two
  // vendors gpu alone names two devices: the vendor tells them apart.
  deviceLegend: '{{node}} {{vendor}} gpu{{gpu}} {{namespace}}/{{pod}}{{slurm_job_id}}{{unit}}',

  // Per-hour recording rules summed over the dashboard's time range.
  // The rules are evaluated every usageRulesInterval, so the sum over the
  // range divided by the evaluations per hour is the total.
  overRange(selector):: 'sum_over_time(%s[$__range]) / %g' % [selector, 3600 / util.seconds(c.usageRulesInterval)],

  local owners = 'xpu_workload_info{%s, %s, node=~"$node"' % [c.xpuSelector, cluster],

  // Every dashboard starts with these: device-level dashboards stop here.
  variables: [
    g.datasourceVariable(),
    g.queryVariable('cluster', 'Cluster', 'label_values(xpu_device_up{%s}, %s)' % [c.xpuSelector, c.clusterLabel], hide=!c.showMultiCluster),
    g.queryVariable('node', 'Node', 'label_values(xpu_device_up{%s, %s}, node)' % [c.xpuSelector, cluster]),
    // A mixed fleet shows one vendor's devices at a time, or all.
    g.queryVariable('vendor', 'Vendor', 'label_values(xpu_device_info{%s, %s, node=~"$node"}, vendor)' % [c.xpuSelector, cluster]),
  ],
  // Dashboards with per-owner panels add the owner, from the owners the
  // exporter knows (xpu_workload_info, one series per owner).
  ownerVariables: [
    g.queryVariable('namespace', 'Namespace', 'label_values(%s}, namespace)' % owners),
    g.queryVariable('workload', 'Workload', 'label_values(%s, namespace=~"$namespace"}, workload)' % owners),
    g.queryVariable('pod', 'Pod', 'label_values(%s, namespace=~"$namespace", workload=~"$workload"}, pod)' % owners),
  ],
  // The gpu label is a number per vendor: its values follow the Vendor
  // variable, and the description says to pick the vendor on a mixed node.
  gpuVariable: g.queryVariable(
    'gpu',
    'GPU',
    'label_values(xpu_device_up{%s, %s, node=~"$node", %s}, gpu)' % [c.xpuSelector, cluster, self.vendor],
    description='Device number on its node, counted per vendor: NVIDIA, AMD and Gaudi each start at 0, so on a node with two vendors pick the Vendor too, or a number selects one device of each.',
  ),
}

// Profiling: which parts of the device a workload keeps busy (NVML GPM on
// Hopper and later, or the dcgm-exporter bridge).
local g = import '../lib/grafana.libsonnet';
local util = import '../lib/util.libsonnet';
local common = import 'common.libsonnet';

{
  local c = $._config,
  local d = common(c),
  local s = d.ownerDeviceSelector,
  local ratio(metric, title, description) =
    g.timeseries(title, description, [g.target('%s{%s}' % [metric, s], d.deviceLegend)], unit='percentunit', min=0, max=1),
  // Allow-listed pod labels are joined from xpu_workload_info, the only
  // series that carries them.
  local pods = std.join(', ', [c.clusterLabel, 'namespace', 'pod']),
  local podAverage(metric) = g.target(util.withPodLabels(c, 'avg by (%s) (avg_over_time(%s{%s, pod!=""}[$__range]))' % [pods, metric, s]), instant=true),

  grafanaDashboards+:: {
    'xpu-profiling.json': g.dashboard(
      c,
      'xpu-profiling',
      'Profiling',
      'Streaming-multiprocessor, tensor-core, memory-bandwidth and floating-point pipe activity per device and workload.',
      d.variables + [d.gpuVariable] + d.ownerVariables,
      [
        g.row('Compute'),
        ratio('xpu_sm_active_ratio', 'SM active', 'Share of the streaming multiprocessors with work resident. A device can report 100% utilization (some kernel running) while most SMs sit idle; this shows how much of the chip the kernels fill.'),
        ratio('xpu_sm_occupancy_ratio', 'SM occupancy', 'Resident warps relative to the maximum the SMs can hold: low occupancy with high SM activity points at register or shared-memory limits.'),
        ratio('xpu_tensor_active_ratio', 'Tensor cores active', 'Share of cycles the tensor cores are busy: mixed-precision training and inference should keep them well above zero.'),
        ratio('xpu_dram_active_ratio', 'Memory bandwidth active', 'Share of cycles device memory is transferring data: near 100% means the workload is memory-bound.'),

        g.row('Floating-point pipes'),
        ratio('xpu_fp16_active_ratio', 'FP16 pipe active', 'Share of cycles the half-precision pipe is busy.') + g.size(8),
        ratio('xpu_fp32_active_ratio', 'FP32 pipe active', 'Share of cycles the single-precision pipe is busy.') + g.size(8),
        ratio('xpu_fp64_active_ratio', 'FP64 pipe active', 'Share of cycles the double-precision pipe is busy.') + g.size(8),

        g.row('NVLink'),
        g.timeseries('NVLink throughput', 'Bytes per second over all NVLink links of each device.', [
          g.target('sum by (node, gpu, direction) (xpu_nvlink_throughput_bytes_per_second{%s})' % s, '{{node}} gpu{{gpu}} {{direction}}'),
        ], unit='Bps', min=0),
        g.timeseries('NVLink errors', 'NVLink errors per second by link and type; any steady rate points at a bad link or bridge.', [
          g.target('sum by (node, gpu, link, type) (rate(xpu_nvlink_errors_total{%s}[$__rate_interval]))' % s, '{{node}} gpu{{gpu}} {{type}} {{link}}'),
        ], min=0),

        g.row('Workloads'),
        g.table('Pods over the time range', 'Mean activity of the devices each pod owns alone (shared devices have no single owner to credit).', [
          podAverage('xpu_sm_active_ratio'),
          podAverage('xpu_sm_occupancy_ratio'),
          podAverage('xpu_tensor_active_ratio'),
          podAverage('xpu_dram_active_ratio'),
        ], [
          { name: 'SM active', unit: 'percentunit' },
          { name: 'SM occupancy', unit: 'percentunit' },
          { name: 'Tensor active', unit: 'percentunit' },
          { name: 'Memory bandwidth active', unit: 'percentunit' },
        ]) + g.size(24),
      ]
    ),
  },
}

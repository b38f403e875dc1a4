// Inference engines (vLLM, SGLang, TGI, Triton, NIM) through the exporter's
// engine-neutral xpu_inference_* metrics.
local g = import '../lib/grafana.libsonnet';
local common = import 'common.libsonnet';

{
  local c = $._config,
  local d = common(c),
  local s = '%s, engine=~"$engine"' % d.selector,
  local server = 'engine, model, namespace, pod, slurm_job_id, unit',
  local legend = '{{engine}} {{model}} {{namespace}}/{{pod}}{{slurm_job_id}}{{unit}}',
  // The engine recording rules keep the cluster, node, owner and engine.
  local rules = '%s, node=~"$node", namespace=~"$namespace", workload=~"$workload", pod=~"$pod", engine=~"$engine"' % d.cluster,
  local noPrice = 'no price configured',
  local quantile(q, histogram) =
    g.target('histogram_quantile(%g, sum by (le, %s) (rate(%s_bucket{%s}[$__rate_interval])))' % [q, server, histogram, s], 'p%g %s' % [q * 100, legend]),

  grafanaDashboards+:: {
    'xpu-inference.json': g.dashboard(
      c,
      'xpu-inference',
      'Inference engines',
      'Load, throughput, latency, KV cache and errors of the inference servers running on the devices.',
      d.variables + d.ownerVariables + [
        // xpu_inference_up names the endpoint, not its owner.
        g.queryVariable('engine', 'Engine', 'label_values(xpu_inference_up{%s}, engine)' % d.nodeSelector),
      ],
      [
        g.row('Servers'),
        g.table('Engines', 'Every engine endpoint the exporter scrapes; 0 means the last scrape of it failed.', [
          g.target('xpu_inference_up{%s, engine=~"$engine"}' % d.nodeSelector, instant=true),
        ], [{ name: 'Up', unit: 'short' }]) + g.size(24, 6),
        g.timeseries('Requests running', 'Requests in the running batch.', [
          g.target('sum by (%s) (xpu_inference_requests_running{%s})' % [server, s], legend),
        ], min=0),
        g.timeseries('Requests waiting', 'Requests queued for a place in the batch: a queue that keeps growing means the server is saturated.', [
          g.target('sum by (%s) (xpu_inference_requests_waiting{%s})' % [server, s], legend),
        ], min=0),

        g.row('Throughput'),
        g.timeseries('Requests per second by outcome', 'Finished requests per second: success, error, or aborted by the client.', [
          g.target('sum by (%s, outcome) (rate(xpu_inference_requests_total{%s}[$__rate_interval]))' % [server, s], '%s {{outcome}}' % legend),
        ], unit='reqps', min=0),
        g.timeseries('Tokens per second', 'Prompt tokens processed and tokens generated per second.', [
          g.target('sum by (%s, type) (rate(xpu_inference_tokens_total{%s}[$__rate_interval]))' % [server, s], '%s {{type}}' % legend),
        ], min=0),
        g.timeseries('Error ratio', 'Share of finished requests that failed; 0 for an engine serving requests without an error.', [
          // An engine that never failed has no outcome="error" series, and
          // a ratio without a numerator has no series: it would look like
          // an engine without data. Its error rate is 0.
          g.target(|||
            (
              sum by (%(server)s) (rate(xpu_inference_requests_total{%(s)s, outcome="error"}[$__rate_interval]))
              or 0 * sum by (%(server)s) (rate(xpu_inference_requests_total{%(s)s}[$__rate_interval]))
            )
              / sum by (%(server)s) (rate(xpu_inference_requests_total{%(s)s}[$__rate_interval]))
          ||| % { server: server, s: s }, legend),
        ], unit='percentunit', min=0),
        g.timeseries('Preemptions per second', 'Requests evicted from the batch to free KV cache; they restart later and add latency.', [
          g.target('sum by (%s) (rate(xpu_inference_preemptions_total{%s}[$__rate_interval]))' % [server, s], legend),
        ], min=0),

        g.row('Cost and idle engines'),
        g.table('Idle engines', 'Engines holding devices (in whole GPUs) that served fewer than %g requests per second over the last %s: GPUs burning without serving.' % [c.inferenceIdleRequestsPerSecond, c.inferenceRateWindow], [
          g.target('engine:xpu_idle_allocated_devices:sum{%s, %s}' % [rules, d.vendor], instant=true),
        ], [{ name: 'Allocated GPUs', unit: 'short' }], hidden=['target']) + g.size(24, 6),
        g.table('Cost per million generated tokens', 'Cluster-wide: ignores the Node and Vendor variables (a model is served across nodes). What the devices of the engines serving each model cost per hour, idle replicas included, over the tokens they generate, per million tokens. Cost comes from the prices configured in the exporter (xpu_device_hourly_cost); without one this panel says "%s".' % noPrice, [
          g.target('engine_model:xpu_cost_per_million_tokens:ratio{%s, engine=~"$engine"}' % d.cluster, instant=true),
        ], [{ name: 'Cost per million tokens', unit: 'short' }], noValue=noPrice),
        g.table('Cost per million generated tokens by namespace', 'Cluster-wide: ignores the Node and Vendor variables. The same over the engines of each namespace that generate tokens. Cost comes from the prices configured in the exporter (xpu_device_hourly_cost); without one this panel says "%s".' % noPrice, [
          g.target('namespace:xpu_cost_per_million_tokens:ratio{%s, namespace=~"$namespace"}' % d.cluster, instant=true),
        ], [{ name: 'Cost per million tokens', unit: 'short' }], noValue=noPrice),

        g.row('Latency'),
        g.timeseries('Time to first token', 'How long a request waits for its first token (queueing plus prompt processing).', [
          quantile(0.5, 'xpu_inference_time_to_first_token_seconds'),
          quantile(0.95, 'xpu_inference_time_to_first_token_seconds'),
        ], unit='s', min=0) + g.size(8),
        g.timeseries('Inter-token latency', 'Time between two generated tokens of a request.', [
          quantile(0.5, 'xpu_inference_inter_token_latency_seconds'),
          quantile(0.95, 'xpu_inference_inter_token_latency_seconds'),
        ], unit='s', min=0) + g.size(8),
        g.timeseries('Request duration', 'End-to-end time of a request.', [
          quantile(0.5, 'xpu_inference_request_duration_seconds'),
          quantile(0.99, 'xpu_inference_request_duration_seconds'),
        ], unit='s', min=0) + g.size(8),

        g.row('KV cache'),
        g.timeseries('KV cache usage', 'Share of the KV cache blocks in use: near 100% the engine preempts or queues requests.', [
          g.target('xpu_inference_kv_cache_usage_ratio{%s}' % s, legend),
        ], unit='percentunit', min=0, max=1) + g.size(24),
      ]
    ),
  },
}

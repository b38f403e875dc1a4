// Engine-neutral alerts on inference servers (vLLM, SGLang, TGI, Triton,
// NIM): the exporter normalises their metrics to xpu_inference_*.
local util = import '../lib/util.libsonnet';

{
  local c = $._config,
  local fmt = c {
    // Aggregations keep the serving engine, the model and its owner; only
    // the scrape target labels are summed away.
    by: util.labels([c.clusterLabel, 'node'] + util.ownerLabels(c) + ['engine', 'model']),
  },
  local server = '{{ $labels.engine }} serving {{ $labels.model }} (owner: %s)' % util.ownerText,

  prometheusAlerts+:: {
    groups+: [{
      name: 'xpu-inference',
      rules: [
        util.alert(c, {
          alert: 'XpuInferenceTtftHigh',
          expr: |||
            histogram_quantile(0.95,
              sum by (le, %(by)s) (
                rate(xpu_inference_time_to_first_token_seconds_bucket{%(xpuSelector)s}[5m])
              )
            ) > %(inferenceTtftP95Seconds)g
          ||| % fmt,
          'for': c.inferenceTtftFor,
          labels: { severity: 'warning' },
          annotations: {
            summary: 'Inference time to first token is high.',
            description: '%s has a p95 time to first token of {{ $value | humanizeDuration }}.' % server,
          },
        }),
        util.alert(c, {
          alert: 'XpuInferenceLatencyHigh',
          expr: |||
            histogram_quantile(0.99,
              sum by (le, %(by)s) (
                rate(xpu_inference_request_duration_seconds_bucket{%(xpuSelector)s}[5m])
              )
            ) > %(inferenceLatencyP99Seconds)g
          ||| % fmt,
          'for': c.inferenceLatencyFor,
          labels: { severity: 'warning' },
          annotations: {
            summary: 'Inference end-to-end latency is high.',
            description: '%s has a p99 request duration of {{ $value | humanizeDuration }}.' % server,
          },
        }),
        util.alert(c, {
          alert: 'XpuInferenceKvCachePressure',
          expr: |||
            xpu_inference_kv_cache_usage_ratio{%(xpuSelector)s} > %(inferenceKvCacheUsageRatio)g
          ||| % fmt,
          'for': c.inferenceKvCacheFor,
          labels: { severity: 'warning' },
          annotations: {
            summary: 'An inference server is running out of KV cache.',
            description: '%s has used {{ $value | humanizePercentage }} of its KV cache for %s; requests get preempted or queued.' % [server, c.inferenceKvCacheFor],
          },
        }),
        util.alert(c, {
          alert: 'XpuInferenceQueueSaturated',
          expr: |||
            xpu_inference_requests_waiting{%(xpuSelector)s} > %(inferenceQueueWaiting)g
          ||| % fmt,
          'for': c.inferenceQueueFor,
          labels: { severity: 'warning' },
          annotations: {
            summary: 'Requests are queuing at an inference server.',
            description: '%s has had more than %g requests waiting for %s ({{ $value }} now).' % [server, c.inferenceQueueWaiting, c.inferenceQueueFor],
          },
        }),
        util.alert(c, {
          alert: 'XpuInferenceThroughputDrop',
          // Compared with the same server an hour earlier; a server that
          // generated nothing then cannot drop.
          expr: |||
            sum by (%(by)s) (rate(xpu_inference_tokens_total{%(xpuSelector)s, type="generation"}[10m]))
              < %(inferenceThroughputDropRatio)g
                * sum by (%(by)s) (rate(xpu_inference_tokens_total{%(xpuSelector)s, type="generation"}[10m] offset 1h))
          ||| % fmt,
          'for': c.inferenceThroughputFor,
          labels: { severity: 'info' },
          annotations: {
            summary: 'Inference token throughput dropped compared with an hour ago.',
            description: '%s generates {{ $value | humanize }} tokens/s, less than %s of its rate an hour ago.' % [server, util.percent(c.inferenceThroughputDropRatio)],
          },
        }),
        util.alert(c, {
          alert: 'XpuInferenceErrorRateHigh',
          expr: |||
            sum by (%(by)s) (rate(xpu_inference_requests_total{%(xpuSelector)s, outcome="error"}[5m]))
              / sum by (%(by)s) (rate(xpu_inference_requests_total{%(xpuSelector)s}[5m]))
              > %(inferenceErrorRatio)g
          ||| % fmt,
          'for': c.inferenceErrorFor,
          labels: { severity: 'warning' },
          annotations: {
            summary: 'An inference server fails many requests.',
            description: '%s fails {{ $value | humanizePercentage }} of its requests.' % server,
          },
        }),
      ],
    }],
  },
}

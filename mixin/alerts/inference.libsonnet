// Engine-neutral alerts on inference servers (vLLM, SGLang, TGI, Triton,
// NIM): the exporter normalises their metrics to xpu_inference_*.
local util = import '../lib/util.libsonnet';

{
  local c = $._config,
  local fmt = c {
    // Aggregations keep the serving engine, the model, its owner and the
    // exporter's target (job, instance: on bare metal, scraped with static
    // targets, instance is all that tells two nodes' engines apart, as
    // their endpoint and unit are the same); only the engine's endpoint
    // (target) is summed away.
    by: util.labels([c.clusterLabel, 'job', 'instance', 'node'] + util.ownerLabels(c) + ['engine', 'model']),
    target: util.labels([c.clusterLabel, 'job', 'instance', 'engine', 'target']),
    owner: util.labels(util.ownerLabels(c)),
  },
  local where = '{{ with $labels.node }}{{ . }}{{ else }}{{ $labels.instance }}{{ end }}',
  local server = '{{ $labels.engine }} serving {{ $labels.model }} on %s (owner: %s)' % [where, util.ownerText],

  prometheusAlerts+:: {
    groups+: [{
      name: 'xpu-inference',
      rules: [
        util.alert(c, {
          alert: 'XpuInferenceTtftHigh',
          expr: util.withPodLabels(c, |||
            histogram_quantile(0.95,
              sum by (le, %(by)s) (
                rate(xpu_inference_time_to_first_token_seconds_bucket{%(xpuSelector)s}[5m])
              )
            ) > %(inferenceTtftP95Seconds)g
          ||| % fmt),
          'for': c.inferenceTtftFor,
          labels: { severity: 'warning' },
          annotations: {
            summary: 'Inference time to first token is high.',
            description: '%s has a p95 time to first token of {{ $value | humanizeDuration }}.' % server,
          },
        }),
        util.alert(c, {
          alert: 'XpuInferenceLatencyHigh',
          expr: util.withPodLabels(c, |||
            histogram_quantile(0.99,
              sum by (le, %(by)s) (
                rate(xpu_inference_request_duration_seconds_bucket{%(xpuSelector)s}[5m])
              )
            ) > %(inferenceLatencyP99Seconds)g
          ||| % fmt),
          'for': c.inferenceLatencyFor,
          labels: { severity: 'warning' },
          annotations: {
            summary: 'Inference end-to-end latency is high.',
            description: '%s has a p99 request duration of {{ $value | humanizeDuration }}.' % server,
          },
        }),
        util.alert(c, {
          alert: 'XpuInferenceKvCachePressure',
          expr: util.withPodLabels(c, |||
            xpu_inference_kv_cache_usage_ratio{%(xpuSelector)s} > %(inferenceKvCacheUsageRatio)g
          ||| % fmt),
          'for': c.inferenceKvCacheFor,
          labels: { severity: 'warning' },
          annotations: {
            summary: 'An inference server is running out of KV cache.',
            description: '%s has used {{ $value | humanizePercentage }} of its KV cache for %s; requests get preempted or queued.' % [server, c.inferenceKvCacheFor],
          },
        }),
        util.alert(c, {
          alert: 'XpuInferenceQueueSaturated',
          expr: util.withPodLabels(c, |||
            xpu_inference_requests_waiting{%(xpuSelector)s} > %(inferenceQueueWaiting)g
          ||| % fmt),
          'for': c.inferenceQueueFor,
          labels: { severity: 'warning' },
          annotations: {
            summary: 'Requests are queuing at an inference server.',
            description: '%s has had more than %g requests waiting for %s ({{ $value }} now).' % [server, c.inferenceQueueWaiting, c.inferenceQueueFor],
          },
        }),
        util.alert(c, {
          alert: 'XpuInferenceErrorRateHigh',
          // Judged only above a minimum request rate, so that a server
          // failing one request of the few it got is not paged on.
          expr: util.withPodLabels(c, |||
            (
              sum by (%(by)s) (rate(xpu_inference_requests_total{%(xpuSelector)s, outcome="error"}[5m]))
                / sum by (%(by)s) (rate(xpu_inference_requests_total{%(xpuSelector)s}[5m]))
                > %(inferenceErrorRatio)g
            )
            and
              sum by (%(by)s) (rate(xpu_inference_requests_total{%(xpuSelector)s}[5m]))
                >= %(inferenceErrorMinRequestsPerSecond)g
          ||| % fmt),
          'for': c.inferenceErrorFor,
          labels: { severity: 'warning' },
          annotations: {
            summary: 'An inference server fails many requests.',
            description: '%s fails {{ $value | humanizePercentage }} of its requests.' % server,
          },
        }),
        util.alert(c, {
          alert: 'XpuInferenceEngineDown',
          // xpu_inference_up names only the engine and its endpoint; the
          // owner comes from xpu_inference_device_info of the same
          // endpoint, where the exporter knows it.
          expr: util.withPodLabels(c, |||
            (xpu_inference_up{%(xpuSelector)s} == 0)
              * on (%(target)s) group_left (%(owner)s)
              group by (%(target)s, %(owner)s) (xpu_inference_device_info{%(xpuSelector)s})
            or (
              xpu_inference_up{%(xpuSelector)s} == 0
                unless on (%(target)s) xpu_inference_device_info{%(xpuSelector)s}
            )
          ||| % fmt),
          'for': c.inferenceDownFor,
          labels: { severity: 'warning' },
          annotations: {
            summary: 'An inference engine does not answer.',
            description: '{{ $labels.engine }} at {{ $labels.target }} on %s (owner: %s) has not answered the exporter for %s.' % [where, util.ownerText, c.inferenceDownFor],
          },
        }),
      ],
    }],
  },
}

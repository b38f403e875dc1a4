// What inference engines cost and whether they serve: the devices and cost
// of each engine instance (one scrape target), its request and token rates,
// the engines that hold devices without serving, and the cost of a million
// generated tokens per engine and model and per namespace.
//
// An engine's devices are those of xpu_inference_device_info (the GPUs its
// pod, Slurm job or unit holds), each counted with the allocation its owner
// has on it: a time-slice replica 1/N, a MIG instance its fraction of the
// GPU, priced at its physical GPU's price. Several engines of one owner
// (two endpoints of a pod) share its devices in equal parts, so that they
// together hold and cost what the owner does. An engine one of whose
// devices has no price has no cost, rather than the part that is priced,
// and its tokens are left out of the cost per million tokens, which would
// otherwise spread the priced engines' cost over tokens it does not pay
// for (found by probe19-engines: D2, D3).
local util = import '../lib/util.libsonnet';

{
  local c = $._config,
  // One engine instance: its scrape target with its owner, and the node
  // (a target label: no more series) for the dashboards' Node variable.
  local engine = [c.clusterLabel, 'job', 'instance', 'node', 'engine', 'target'] + util.ownerLabels(c),
  // An owner's identity on a device: the labels xpu_inference_device_info
  // and xpu_workload_allocated_devices share.
  local ownerOnDevice = c.deviceKeyLabels + ['namespace', 'pod', 'slurm_job_id', 'unit'],
  local target = util.labels([c.clusterLabel, 'job', 'instance', 'target']),
  local fmt = c {
    engine: util.labels(engine),
    ownerOnDevice: util.labels(ownerOnDevice),
    target: target,
    key: util.labels(c.deviceKeyLabels),
  },

  // One series per engine and device, worth the engine owner's allocation
  // on it over the number of the owner's engines on it, with the device's
  // parent_uuid (MIG instances) and vendor (the dashboards' Vendor
  // variable).
  local engineDevices = |||
    (
      xpu_inference_device_info{%(xpuSelector)s}
        / on (%(ownerOnDevice)s) group_left ()
        count by (%(ownerOnDevice)s) (xpu_inference_device_info{%(xpuSelector)s})
    )
      * on (%(ownerOnDevice)s) group_left (parent_uuid, vendor)
      sum by (%(ownerOnDevice)s, parent_uuid, vendor) (xpu_workload_allocated_devices{%(xpuSelector)s})
  ||| % fmt,

  // Priced per physical GPU: gpu_uuid is the device's own uuid, or its
  // parent's for a MIG instance, so that two instances of one GPU stay two
  // series.
  local gpuUUID(expr) = |||
    label_replace(
      label_replace(
    %s,
        "gpu_uuid", "$1", "uuid", "(.+)"
      ),
      "gpu_uuid", "$1", "parent_uuid", "(.+)"
    )
  ||| % util.indent(util.indent(expr)),
  local price = |||
    label_replace(
      max by (%(key)s, currency) (xpu_device_hourly_cost{%(xpuSelector)s, parent_uuid=""}),
      "gpu_uuid", "$1", "uuid", "(.+)"
    )
  ||| % fmt,
  local tokensPerMillionHour = '* 3600 / 1e6',

  prometheusRules+:: {
    groups+: [
      {
        name: 'xpu-inference-cost.rules',
        interval: c.usageRulesInterval,
        rules: [
          {
            // Devices each engine instance holds, in whole GPUs, by vendor
            // (a pod holding two vendors' GPUs has them named by both of
            // a node's per-vendor exporters, one instance).
            record: 'engine:xpu_allocated_devices:sum',
            expr: 'sum by (%s, vendor) (\n%s\n)\n' % [fmt.engine, util.indent(engineDevices)],
          },
          {
            // What those devices cost per hour, for the engines all of
            // whose devices have a price.
            record: 'engine:xpu_cost_per_hour:sum',
            expr: 'sum by (%(engine)s, currency) (\n' % fmt + util.indent(
              gpuUUID(engineDevices)
              + '  * on (%(clusterLabel)s, job, instance, gpu_uuid) group_left (currency)\n' % fmt
              + util.indent(price)
            ) + '\n)\nunless on (%(target)s)\n(\n' % fmt + util.indent(
              gpuUUID(engineDevices)
              + '  unless on (%(clusterLabel)s, job, instance, gpu_uuid)\n' % fmt
              + util.indent(price)
            ) + '\n)\n',
          },
          {
            // Finished requests per second, whatever their outcome.
            record: 'engine:xpu_inference_requests:rate',
            expr: |||
              sum by (%(engine)s) (rate(xpu_inference_requests_total{%(xpuSelector)s}[%(inferenceRateWindow)s]))
            ||| % fmt,
          },
          {
            // Generated tokens per second, per engine instance and model.
            record: 'engine:xpu_inference_generation_tokens:rate',
            expr: |||
              sum by (%(engine)s, model) (rate(xpu_inference_tokens_total{%(xpuSelector)s, type="generation"}[%(inferenceRateWindow)s]))
            ||| % fmt,
          },
          {
            // Engines that hold devices and serve (almost) no request: the
            // devices they hold. An engine without a request counter is
            // not judged.
            record: 'engine:xpu_idle_allocated_devices:sum',
            expr: |||
              engine:xpu_allocated_devices:sum
                and on (%(target)s)
                engine:xpu_inference_requests:rate < %(inferenceIdleRequestsPerSecond)g
            ||| % fmt,
          },
          {
            // The cost of the engines serving a model (idle replicas
            // included) over the tokens they generate: per million tokens.
            // An engine serving several models (Triton) is charged to each
            // by its share of the engine's generated tokens, an idle one
            // in equal parts: the models together cost what the engine
            // does, never once per model.
            record: 'engine_model:xpu_cost_per_million_tokens:ratio',
            expr: |||
              sum by (%(clusterLabel)s, engine, model, currency) (
                (
                  engine:xpu_inference_generation_tokens:rate
                    / on (%(target)s) group_left ()
                    (sum by (%(target)s) (engine:xpu_inference_generation_tokens:rate) > 0)
                  or
                  engine:xpu_inference_generation_tokens:rate * 0
                    + on (%(target)s) group_left ()
                    (1 / count by (%(target)s) (engine:xpu_inference_generation_tokens:rate))
                )
                  * on (%(target)s) group_left (currency)
                  sum by (%(target)s, currency) (engine:xpu_cost_per_hour:sum)
              )
                / on (%(clusterLabel)s, engine, model) group_left ()
                (
                  sum by (%(clusterLabel)s, engine, model) (
                    engine:xpu_inference_generation_tokens:rate
                      and on (%(target)s)
                      engine:xpu_cost_per_hour:sum
                  ) %(perMillion)s > 0
                )
            ||| % (fmt { perMillion: tokensPerMillionHour }),
          },
          {
            // The same per namespace, over its engines that generate
            // tokens.
            record: 'namespace:xpu_cost_per_million_tokens:ratio',
            expr: |||
              sum by (%(clusterLabel)s, namespace, currency) (
                engine:xpu_cost_per_hour:sum{namespace!=""}
                  and on (%(target)s)
                  engine:xpu_inference_generation_tokens:rate
              )
                / on (%(clusterLabel)s, namespace) group_left ()
                (
                  sum by (%(clusterLabel)s, namespace) (
                    engine:xpu_inference_generation_tokens:rate{namespace!=""}
                      and on (%(target)s)
                      engine:xpu_cost_per_hour:sum
                  ) %(perMillion)s > 0
                )
            ||| % (fmt { perMillion: tokensPerMillionHour }),
          },
        ],
      },
    ],
  },
}

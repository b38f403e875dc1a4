// The answer book: the questions users bring, each answered by one query
// over the exporter's series and the mixin's recording rules, and the
// dashboard panel that shows the same. README.md ("Questions and answers")
// prints these queries (mixin_test.go checks it does, word for word) and
// ../e2e/answers_test.go runs every one against a Prometheus scraping the
// demo node.
local util = import 'lib/util.libsonnet';

{
  // month: the period totals are taken over; week: how far back an Xid is
  // looked for. The end-to-end test passes shorter ones.
  answers(month='30d', week='7d')::
    local c = $._config;
    // Evaluations of the usage rules per hour: their per-hour values summed
    // over a period and divided by this are totals.
    local perHour = 3600 / util.seconds(c.usageRulesInterval);
    local total(rule, label, value) =
      'label_replace(sum_over_time(%s[%s]) / %g, "%s", "%s", "", "")' % [rule, month, perHour, label, value];
    [
      {
        question: 'Which team (namespace, Slurm account) consumed the most GPU-hours this month, allocated and actually used?',
        query: 'sort_desc(\n%s\n)' % util.indent(std.join('\nor ', [
          total('%s:xpu_%s_devices:sum' % [level, kind], 'gpu_hours', if kind == 'allocated' then 'allocated' else 'used')
          for level in ['namespace', 'slurm_account']
          for kind in ['allocated', 'utilized']
        ])),
        panels: { 'xpu-attribution.json': ['Teams by GPU-hours over the time range'] },
      },
      {
        question: 'Which pod caused the utilization spike on a node at a given time?',
        query: std.rstripChars(|||
          topk(3, sum by (%(clusterLabel)s, node, namespace, pod, slurm_job_id, unit) (
            device_owner:xpu_utilized_devices:ratio{node="demo-h100-node"}
          ))
        ||| % c, '\n'),
        panels: { 'xpu-attribution.json': ['Top owners by utilized GPUs'] },
      },
      {
        question: 'What was running on a GPU when Xid errors fired (hours later, the pod gone)?',
        query: 'max_over_time(xpu_xid_errors_total{%s, node="demo-h100-node", gpu="3"}[%s])' % [c.xpuSelector, week],
        panels: { 'xpu-health.json': ['Hardware XID errors', 'Application XID errors'] },
      },
      {
        question: 'Which inference engine instance burns GPU without serving requests?',
        query: 'engine:xpu_idle_allocated_devices:sum',
        panels: { 'xpu-inference.json': ['Idle engines'] },
      },
      {
        question: 'Is utilization low because GPUs sit unallocated, or because allocated GPUs are idle?',
        query: 'model_state:xpu_devices:sum',
        panels: { 'xpu-fleet-overview.json': ['Capacity by state', 'Capacity by model and state'] },
      },
      {
        question: 'Which Slurm account should be billed for a training run, in GPU-hours, energy and cost?',
        query: std.join('\nor ', [
          total('slurm_job:%s{slurm_job_id="4242"}' % rule, 'quantity', quantity)
          for q in [['xpu_allocated_devices:sum', 'gpu_hours'], ['xpu_energy_kwh_per_hour:sum', 'kwh'], ['xpu_cost_per_hour:sum', 'cost']]
          for rule in [q[0]]
          for quantity in [q[1]]
        ]),
        panels: { 'xpu-attribution.json': ['Slurm jobs over the time range'] },
      },
      {
        question: 'What does a million generated tokens cost per model and engine, and per namespace?',
        query: 'engine_model:xpu_cost_per_million_tokens:ratio\nor namespace:xpu_cost_per_million_tokens:ratio',
        panels: { 'xpu-inference.json': ['Cost per million generated tokens'] },
      },
    ],
}

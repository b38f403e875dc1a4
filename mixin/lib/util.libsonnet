// Helpers shared by the alerts, rules and dashboards.
{
  // 'a, b, c' for by/on/without clauses.
  labels(list):: std.join(', ', list),

  // Every owner label, in the order alerts and tables show them.
  ownerLabels(c):: c.ownerLabels.kubernetes + c.podLabelAllowList + c.ownerLabels.slurm + c.ownerLabels.process,

  // '1m' -> 60: rules need some windows as numbers (time() arithmetic,
  // evaluations per hour) while the config keeps Prometheus durations.
  seconds(duration)::
    local units = { s: 1, m: 60, h: 3600, d: 86400 };
    local n = std.length(duration);
    std.parseInt(duration[:n - 1]) * units[duration[n - 1]],

  // 0.05 -> '5%' for annotations.
  percent(ratio):: '%g%%' % (std.round(ratio * 10000) / 100),

  // Indents every line of a multi-line expression by two spaces, to nest it.
  indent(expr):: std.join('\n', ['  ' + line for line in std.split(std.rstripChars(expr, '\n'), '\n')]),

  // 'a|b|c' for a regex matcher.
  regex(list):: std.join('|', list),

  // Alert annotation fragments. Owner labels are present only when the
  // device has exactly one owner, so the text falls through the owner kinds.
  deviceText::
    '{{ $labels.model }} GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ with $labels.node }}{{ . }}{{ else }}{{ $labels.instance }}{{ end }}',
  ownerText::
    '{{ if $labels.pod }}pod {{ $labels.namespace }}/{{ $labels.pod }}'
    + '{{ else if $labels.slurm_job_id }}Slurm job {{ $labels.slurm_job_id }} of {{ $labels.slurm_user }}'
    + '{{ else if $labels.unit }}{{ $labels.unit }} of {{ $labels.user }}'
    + '{{ else }}no single owner{{ end }}',
  clusterText(c):: '{{ with $labels.%s }} in cluster {{ . }}{{ end }}' % c.clusterLabel,

  // An alerting rule with the annotations every alert carries.
  alert(c, rule):: rule {
    annotations+: { runbook_url: c.runbookURLPattern % std.asciiLower(rule.alert) },
  },
}

// Renders promrules/ (`make promrules`): PrometheusRule CRDs for the
// Prometheus Operator and the same groups as plain rule files for promtool
// and for a Prometheus without the operator.
local mixin = import 'mixin.libsonnet';

local header = '# Generated from mixin/ by `make promrules`. DO NOT EDIT.\n';

local isHealth(group) = group.name == 'xpu-health.rules';

// The alerts; the health score they read (a Prometheus loading the alerts
// needs it too); the recording rules the dashboards and chargeback read.
local files = {
  'xpu-alerts': mixin.prometheusAlerts.groups,
  'xpu-health': std.filter(isHealth, mixin.prometheusRules.groups),
  'xpu-recording-rules': std.filter(function(g) !isHealth(g), mixin.prometheusRules.groups),
};

local yaml(value) = header + std.manifestYamlDoc(value, quote_keys=false);

{
  ['%s.yaml' % name]: yaml({
    apiVersion: 'monitoring.coreos.com/v1',
    kind: 'PrometheusRule',
    metadata: {
      name: name,
      labels: {
        'app.kubernetes.io/name': 'xpu-exporter',
        'app.kubernetes.io/component': 'rules',
      },
    },
    spec: { groups: files[name] },
  })
  for name in std.objectFields(files)
} + {
  ['prometheus/%s.rules.yaml' % name]: yaml({ groups: files[name] })
  for name in std.objectFields(files)
}

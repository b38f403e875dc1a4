// Stand-in for kube-prometheus' lib/mixin.libsonnet with the same contract:
// a mixin's alerts and rules become one PrometheusRule, its dashboards are
// handed to Grafana (in a folder when dashboardFolder is set).
function(params) {
  local mixin = params.mixin,
  prometheusRules: {
    apiVersion: 'monitoring.coreos.com/v1',
    kind: 'PrometheusRule',
    metadata: {
      name: params.name,
      namespace: std.get(params, 'namespace', 'monitoring'),
      labels: { prometheus: 'k8s' },
    },
    spec: { groups: mixin.prometheusAlerts.groups + mixin.prometheusRules.groups },
  },
  grafanaDashboards:
    if std.objectHas(params, 'dashboardFolder')
    then { [params.dashboardFolder]: mixin.grafanaDashboards }
    else mixin.grafanaDashboards,
}

// Stand-in for kube-prometheus' main.libsonnet: just the values users
// extend and the Grafana objects rendered from them.
{
  values:: {
    common: { namespace: 'default' },
    grafana: { dashboards: {}, folderDashboards: {} },
  },
  grafana: {
    dashboardDefinitions: {
      apiVersion: 'v1',
      kind: 'ConfigMapList',
      items: [
        {
          apiVersion: 'v1',
          kind: 'ConfigMap',
          metadata: { name: 'grafana-dashboard-' + std.strReplace(name, '.json', ''), namespace: $.values.common.namespace },
          data: { [name]: std.manifestJsonEx(dashboards[name], '    ') },
        }
        for dashboards in [$.values.grafana.dashboards] + std.objectValues($.values.grafana.folderDashboards)
        for name in std.objectFields(dashboards)
      ],
    },
  },
}

// The README's kube-prometheus snippet, evaluated by mixin_test.go with
// testdata/jsonnet-path standing in for the vendored kube-prometheus. Only
// the mixin's import path differs: with jsonnet-bundler it is
// 'github.com/xpu-exporter/xpu_exporter/mixin/mixin.libsonnet'.
local addMixin = (import 'kube-prometheus/lib/mixin.libsonnet');

local xpuMixin = addMixin({
  name: 'xpu-exporter',
  dashboardFolder: 'XPU',
  mixin: (import '../mixin.libsonnet') + {
    _config+:: {
      showMultiCluster: true,
    },
  },
});

local kp = (import 'kube-prometheus/main.libsonnet') + {
  values+:: {
    common+: { namespace: 'monitoring' },
    grafana+: {
      folderDashboards+: xpuMixin.grafanaDashboards,
    },
  },
};

{ ['grafana-' + name]: kp.grafana[name] for name in std.objectFields(kp.grafana) } +
{ 'xpu-exporter-prometheusRule': xpuMixin.prometheusRules }

// The xpu_exporter monitoring mixin: prometheusAlerts, prometheusRules and
// grafanaDashboards, configured through _config (config.libsonnet), and the
// answer book (answers.libsonnet).
(import 'config.libsonnet') +
(import 'alerts/alerts.libsonnet') +
(import 'rules/rules.libsonnet') +
(import 'dashboards/dashboards.libsonnet') +
(import 'answers.libsonnet')

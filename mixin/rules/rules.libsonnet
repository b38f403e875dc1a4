(import 'health.libsonnet') +
(import 'usage.libsonnet')

(import 'health.libsonnet') +
(import 'usage.libsonnet') +
(import 'inference.libsonnet')

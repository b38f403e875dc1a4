(import 'fleet.libsonnet') +
(import 'attribution.libsonnet') +
(import 'profiling.libsonnet') +
(import 'inference.libsonnet') +
(import 'health.libsonnet')

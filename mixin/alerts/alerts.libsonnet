(import 'device.libsonnet') +
(import 'fleet.libsonnet') +
(import 'inference.libsonnet')

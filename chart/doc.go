// Package chart holds the Helm chart of xpu_exporter (Chart.yaml,
// values.yaml, templates/) and, in chart_test.go, its tests: helm template
// with the default values and every profile in ci/, each rendered object
// decoded strictly into the Kubernetes and Prometheus-operator API types, and
// checks that values, schema and templates agree. There is no Go code here.
package chart

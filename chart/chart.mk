# The Helm chart: its build tool, the copies of the generated rules and
# dashboards it ships, and its checks. Included from the top-level Makefile;
# paths are relative to the repository root.
#
# Helm cannot package files outside the chart directory, so the chart ships
# copies of promrules/*.yaml (the PrometheusRule CRDs) and dashboards/*.json
# in chart/files/. They are committed, so `helm install ./chart` works from a
# clone; `make chart-files` refreshes them after `make promrules dashboards`,
# and chart-check fails when they differ from the sources.

GO ?= go
HELM := bin/helm

CHART          := chart
CHART_PROFILES := $(wildcard $(CHART)/ci/*-values.yaml)
CHART_RULES    := $(wildcard promrules/*.yaml)
CHART_BOARDS   := $(wildcard dashboards/*.json)

.PHONY: chart-tools chart-files chart-files-check chart-lint chart-test chart-check chart-package

# helm at the version pinned by tools/go.mod, built once into bin/.
chart-tools: $(HELM)

# The -X flags are the ones helm's own Makefile sets: without them helm
# reports no version and assumes Kubernetes 1.20 (so it would refuse the
# chart's kubeVersion); the Kubernetes minor is that of the client-go helm is
# built with, as upstream does.
$(HELM): tools/go.mod tools/go.sum
	cd tools && v=$$($(GO) list -m -f '{{.Version}}' helm.sh/helm/v3) && \
	k8s=$$($(GO) list -m -f '{{.Version}}' k8s.io/client-go | cut -d. -f2) && \
	$(GO) build -trimpath -o ../$@ -ldflags "-s -w \
	  -X helm.sh/helm/v3/internal/version.version=$$v -X helm.sh/helm/v3/internal/version.metadata= \
	  -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$$k8s \
	  -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$$k8s" \
	  helm.sh/helm/v3/cmd/helm

# Copy the generated rules and dashboards into the chart (stale copies of
# removed files go too).
chart-files:
	rm -rf $(CHART)/files/promrules $(CHART)/files/dashboards
	mkdir -p $(CHART)/files/promrules $(CHART)/files/dashboards
	cp $(CHART_RULES) $(CHART)/files/promrules/
	cp $(CHART_BOARDS) $(CHART)/files/dashboards/

chart-files-check:
	@diff -r -x prometheus -x tests promrules $(CHART)/files/promrules && \
	diff -r dashboards $(CHART)/files/dashboards || \
	{ echo 'chart/files/ differs from promrules/ or dashboards/: run make chart-files' >&2; exit 1; }

# helm lint --strict with the default values and every profile in chart/ci/.
chart-lint: $(HELM)
	$(HELM) lint --strict $(CHART)
	@set -e; for f in $(CHART_PROFILES); do \
	  echo "$(HELM) lint --strict $(CHART) -f $$f"; $(HELM) lint --strict --quiet $(CHART) -f $$f; done

# helm template of every profile, each rendered object decoded strictly into
# the Kubernetes and Prometheus-operator API types, plus the value and
# schema checks (chart/chart_test.go). XPU_REQUIRE_HELM turns the test's
# "no helm, skipped" into a failure.
chart-test: $(HELM)
	HELM=$(abspath $(HELM)) XPU_REQUIRE_HELM=1 $(GO) test -count=1 ./$(CHART)/

chart-check: chart-files-check chart-lint chart-test

# The packaged chart, dist/xpu-exporter-$(VERSION).tgz.
chart-package: $(HELM) chart-files-check
	@mkdir -p dist
	$(HELM) package $(CHART) --version $(VERSION) --app-version $(VERSION) --destination dist

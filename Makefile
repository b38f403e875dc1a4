# xpu_exporter — `make test` runs every check CI runs; `make demo` runs the
# exporter on a simulated node. The mixin, chart and packaging targets live
# in the fragments included below.
GO        ?= go
PROMTOOL  ?= promtool
BIN       := xpu_exporter
PKG       := github.com/prometheus/common/version
VERSION   := $(shell cat VERSION 2>/dev/null || echo 0.0.0-dev)
REVISION  := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
BRANCH    := $(shell git rev-parse --abbrev-ref HEAD 2>/dev/null || echo unknown)
LDFLAGS   := -X $(PKG).Version=$(VERSION) -X $(PKG).Revision=$(REVISION) -X $(PKG).Branch=$(BRANCH) \
             -X $(PKG).BuildUser=xpu_exporter -X $(PKG).BuildDate=$(shell date -u +%Y%m%d-%H:%M:%S)

# go-nvml's cgo bindings declare NVML functions deprecated by newer drivers;
# the warnings say nothing about this project.
export CGO_ENABLED := 1
export CGO_CFLAGS  := -Wno-deprecated-declarations

.PHONY: all build demo test vet fmt-check unit build-deps test-deps bench clean

# apt-get as root, else through sudo: CI runs as root, developers may not.
APT_INSTALL = SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq

all: build

build: build-deps
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) .

demo: build
	./$(BIN) --demo

include mixin/mixin.mk
include chart/chart.mk
include packaging/packaging.mk

## test: everything CI checks. chart-tools comes before the unit tests,
## whose chart tests render with bin/helm.
test: build-deps test-deps chart-tools vet fmt-check unit mixin-check chart-check \
	package-check install-check readme-check

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# Unit and end-to-end tests (with the race detector): e2e/ builds the real
# binary and scrapes it.
unit:
	$(GO) test -count=1 -race ./...

# NVML is reached through cgo, so building needs a C compiler.
build-deps:
	@command -v gcc >/dev/null 2>&1 || { echo "installing gcc (cgo needs it for NVML)"; $(APT_INSTALL) gcc libc6-dev >/dev/null; }

# Debian packages the tests need, by a command each provides: promtool and
# a Prometheus server, headless Chromium for the /devices page, a real
# single-node Slurm cluster with munge for the Slurm end-to-end test, and
# systemd's tools and curl for the install checks.
TEST_PACKAGES := promtool:prometheus chromium:chromium slurmctld:slurmctld slurmd:slurmd \
                 scontrol:slurm-client munged:munge systemd-analyze:systemd curl:curl

test-deps:
	@missing=; for dep in $(TEST_PACKAGES); do \
	  command -v $${dep%%:*} >/dev/null 2>&1 || missing="$$missing $${dep#*:}"; done; \
	if [ -n "$$missing" ]; then echo "installing Debian packages:$$missing"; $(APT_INSTALL) $$missing >/dev/null; fi

## bench: scrape-path benchmarks (speed and memory targets live here, not in tests).
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./collector/ ./vendors/...

clean:
	rm -f $(BIN)
	rm -rf bin

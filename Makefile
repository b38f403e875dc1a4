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

.PHONY: all build demo test vet fmt-check tidy-check staticcheck unit build-deps test-deps bench load soak rss fleet fuzz clean

# apt-get as root, else through sudo: CI runs as root, developers may not.
APT_INSTALL = SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq

all: build

# Built as the release binaries are (packaging.mk): -trimpath, and -s -w drop
# the symbol table and DWARF, 12 MiB of the file. Neither is loaded at run
# time, so resident memory does not change (make rss). For a debugger or
# `go tool nm`, build with plain `go build`.
build: build-deps
	$(GO) build -trimpath -ldflags '$(LDFLAGS) -s -w' -o $(BIN) .

demo: build
	./$(BIN) --demo

include mixin/mixin.mk
include chart/chart.mk
include packaging/packaging.mk

## test: everything CI checks. chart-tools comes before the unit tests,
## whose chart tests render with bin/helm.
test: build-deps test-deps chart-tools vet fmt-check tidy-check staticcheck unit mixin-check chart-check \
	package-check install-check readme-check

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# go.mod and go.sum say exactly what the code imports (direct requirements
# apart from indirect ones), here and in the tools module.
tidy-check:
	$(GO) mod tidy -diff
	cd tools && $(GO) mod tidy -diff

# staticcheck at the version pinned by tools/go.mod, built once into bin/.
STATICCHECK := bin/staticcheck
$(STATICCHECK): tools/go.mod tools/go.sum
	cd tools && $(GO) build -o ../$@ honnef.co/go/tools/cmd/staticcheck

staticcheck: $(STATICCHECK)
	$(STATICCHECK) ./...

# Unit and end-to-end tests (with the race detector): e2e/ builds the real
# binary and scrapes it.
# A CI log shows its tail, where go test leaves only "FAIL <package>": the
# failed tests and panics are repeated there.
unit:
	@log=$$(mktemp); { $(GO) test -count=1 -race ./... 2>&1; echo $$? >"$$log.rc"; } | tee "$$log"; \
	rc=$$(cat "$$log.rc"); \
	if [ "$$rc" != 0 ]; then echo "== failed:"; grep -E -A3 -e '--- FAIL|^panic:' "$$log"; grep -E '^FAIL\s' "$$log"; fi; \
	rm -f "$$log" "$$log.rc"; exit $$rc

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

## bench: scrape-path benchmarks (speed and memory targets live here, not in
## tests), then the scrape cost matrix written to bench/results.md.
## BENCHTIME bounds each benchmark, MATRIXTIME is the scrapes per matrix
## cell (after one warm-up scrape): the whole target takes about 5 minutes.
BENCHTIME ?= 1s
MATRIXTIME ?= 5x
# The benchmarks run on as many CPUs as the binary does by default
# (--runtime.gomaxprocs=1); BENCH_GOMAXPROCS=2 measures two.
BENCH_GOMAXPROCS ?= 1
# The matrix lays out up to 10,000 simulated /proc entries per cell: in
# memory where the machine has a tmpfs, they cost seconds instead of minutes.
BENCH_TMPDIR ?= $(shell [ -d /dev/shm ] && [ -w /dev/shm ] && echo /dev/shm || echo $${TMPDIR:-/tmp})
bench:
	$(GO) test -cpu=$(BENCH_GOMAXPROCS) -run '^$$' -bench . -benchtime=$(BENCHTIME) -benchmem ./vendors/... ./internal/procfd/ ./attribution/process/
	$(GO) test -cpu=$(BENCH_GOMAXPROCS) -run '^$$' -bench '^BenchmarkScrape(|Attributed|NVIDIAAttributed|Shared|SharedDefault|AMD|Gaudi)$$' -benchtime=$(BENCHTIME) -benchmem ./collector/
	TMPDIR=$(BENCH_TMPDIR) $(GO) test -cpu=$(BENCH_GOMAXPROCS) -count=1 -timeout 30m -run '^TestBenchMatrix$$' -benchtime=$(MATRIXTIME) ./collector/ -args -matrix.results=$(CURDIR)/bench/results.md
	@echo "wrote bench/results.md"

## load: the real binary under 1, 2 and 10 concurrent keep-alive scrapers
## (LOAD_DURATION for the 10, half as long for the others): latencies,
## errors, flapping GPUs and the simulator's device reads per second.
LOAD_DURATION ?= 30s
load:
	$(GO) test -count=1 -v -run '^TestLoad$$' ./e2e/ -args -load.duration=$(LOAD_DURATION)

## soak: SOAK_SCRAPES sequential scrapes of the demo binary with pods,
## processes and engine targets churning, then 10,000 /devices requests;
## the memory curve goes to bench/soak.md. Not part of make test, which runs
## a 2,000-scrape version (TestMemoryFlatInDemoMode).
SOAK_SCRAPES ?= 100000
soak:
	$(GO) test -count=1 -v -timeout 3h -run '^TestSoak$$' ./e2e/ -args -soak.scrapes=$(SOAK_SCRAPES) -soak.results=$(CURDIR)/bench/soak.md

## rss: resident memory of the binary make build writes, in demo mode with
## the default 8-GPU scenario: idle, under RSS_SCRAPES sequential gzip
## scrapes on one keep-alive connection, idle again; RSS split into
## anonymous and file-backed pages, Go's heap, CPU and allocation per
## scrape, written to bench/rss.md. RSS_ENV gives the exporter more
## environment (RSS_ENV=GOGC=50,GODEBUG=…). A measurement: not in make test.
RSS_SCRAPES ?= 1000
RSS_ENV     ?=
rss: build
	$(GO) test -count=1 -v -run '^TestRSS$$' ./e2e/ -args -e2e.binary=$(CURDIR)/$(BIN) \
	  -rss.scrapes=$(RSS_SCRAPES) -rss.env='$(RSS_ENV)' -rss.results=$(CURDIR)/bench/rss.md

## fleet: Prometheus sizing by simulation. For each of FLEET_GPUS, enough
## 8-GPU demo nodes (one `--demo` process each, own node name and UUIDs)
## scraped by a fresh Prometheus with the mixin's rules for FLEET_DURATION:
## series per node, samples/s, rule group times, Prometheus memory, written
## to bench/fleet.md. Not part of make test; about 35 minutes with the
## defaults (at 1,000 GPUs: 125 demo processes, 5.5 GiB of RSS in all).
FLEET_GPUS     ?= 10,100,1000
FLEET_DURATION ?= 10m
fleet: build-deps
	$(GO) test -count=1 -v -timeout 1h -run '^TestFleet$$' ./e2e/ -args -fleet.gpus=$(FLEET_GPUS) -fleet.duration=$(FLEET_DURATION) -fleet.results=$(CURDIR)/bench/fleet.md

## fuzz: every native fuzz target (func FuzzXxx in a _test.go file), one
## after another for FUZZTIME each; not part of `make test`. Targets are
## listed by `go test -list` in each package whose tests declare one, so a
## new target is picked up. A crasher is written to the package's
## testdata/fuzz/ and then runs in every `go test` as a regression case.
## A run that fails with "context deadline exceeded" and writes no crasher
## is Go's own race at the -fuzztime deadline (golang/go#75804, fixed in
## Go 1.27), frequent on a loaded machine: reported, not failed.
FUZZTIME         ?= 20s
FUZZMINIMIZETIME ?= 5s
FUZZPARALLEL     ?= 1
fuzz: build-deps
	@failed=; flaked=; log=$$(mktemp); \
	for dir in $$($(GO) list -f '{{.Dir}}' ./...); do \
	  grep -qs '^func Fuzz' $$dir/*_test.go || continue; \
	  pkg=./$$(realpath --relative-to=. $$dir); \
	  for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "--- fuzz $$pkg $$target ($(FUZZTIME))"; \
	    before=$$(ls $$dir/testdata/fuzz/$$target 2>/dev/null | wc -l); \
	    if $(GO) test $$pkg -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) \
	      -fuzzminimizetime $(FUZZMINIMIZETIME) -parallel $(FUZZPARALLEL) >$$log 2>&1; then tail -2 $$log; continue; fi; \
	    cat $$log; \
	    if [ $$(ls $$dir/testdata/fuzz/$$target 2>/dev/null | wc -l) -eq $$before ] && \
	      grep -q '^    context deadline exceeded$$' $$log; then flaked="$$flaked $$pkg:$$target"; \
	    else failed="$$failed $$pkg:$$target"; fi; \
	  done; \
	done; rm -f $$log; \
	if [ -n "$$flaked" ]; then echo "fuzz targets stopped by golang/go#75804, no crasher written:$$flaked"; fi; \
	if [ -n "$$failed" ]; then echo "fuzz targets that failed:$$failed"; exit 1; fi

clean:
	rm -f $(BIN)
	rm -rf bin

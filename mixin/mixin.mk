# The monitoring mixin: build tools, generated rule files and dashboards,
# and their checks. Included from the top-level Makefile; paths are
# relative to the repository root.

GO       ?= go
PROMTOOL ?= promtool

JSONNET    := bin/jsonnet
JSONNETFMT := bin/jsonnetfmt
# The jsonnet sources, i.e. everything jsonnetfmt must keep formatted.
MIXIN_SOURCES := $(shell find mixin -path mixin/vendor -prune -o \( -name '*.jsonnet' -o -name '*.libsonnet' \) -print)

.PHONY: mixin-tools promrules dashboards mixin-check

# jsonnet and jsonnetfmt at the versions pinned by tools/go.mod.
mixin-tools: $(JSONNET) $(JSONNETFMT)

$(JSONNET) $(JSONNETFMT): bin/%: tools/go.mod tools/go.sum
	cd tools && $(GO) build -o ../$@ github.com/google/go-jsonnet/cmd/$*

# $(call render-promrules,DIR): the CRDs into DIR, the plain rule files
# into DIR/prometheus. $(call render-dashboards,DIR): one JSON per dashboard.
render-promrules = $(JSONNET) -S -c -m $(1) mixin/promrules.jsonnet > /dev/null
render-dashboards = $(JSONNET) -S -c -m $(1) mixin/dashboards.jsonnet > /dev/null

promrules: $(JSONNET)
	$(call render-promrules,promrules)

dashboards: $(JSONNET)
	$(call render-dashboards,dashboards)

# Fails when a source is not formatted, when the committed promrules/ or
# dashboards/ differ from what the mixin renders (promrules/tests/ is
# written by hand), or when a rule or its unit tests fail.
mixin-check: $(JSONNET) $(JSONNETFMT)
	$(JSONNETFMT) --test $(MIXIN_SOURCES)
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(call render-promrules,$$tmp/promrules) && \
	$(call render-dashboards,$$tmp/dashboards) && \
	diff -r -x tests promrules $$tmp/promrules && \
	diff -r dashboards $$tmp/dashboards || \
	{ echo 'promrules/ or dashboards/ is out of date: run make promrules dashboards' >&2; exit 1; }
	$(PROMTOOL) check rules promrules/prometheus/*.rules.yaml
	$(PROMTOOL) test rules promrules/tests/*.yaml

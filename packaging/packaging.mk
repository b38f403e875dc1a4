# Packaging: install, release archives, deb and rpm packages, and their
# checks. Included from the top-level Makefile, which defines GO, BIN,
# VERSION, LDFLAGS, APT_INSTALL and the build target; paths are relative to
# the repository root. Everything is written under dist/ (git-ignored).
#
#   make install          binary, systemd unit, sysusers file, default flags (PREFIX, DESTDIR)
#   make uninstall        removes them again (keeps the flags file)
#   make dist             dist/xpu_exporter-$(VERSION).linux-{amd64,arm64}.tar.gz,
#                         the chart dist/xpu-exporter-$(VERSION).tgz, dist/sha256sums.txt
#   make packages         dist/*.deb and dist/*.rpm for both architectures (nfpm)
#   make package-check    what the archives and packages contain
#   make install-check    make install and uninstall into a temporary DESTDIR
#   make readme-check     runs every command of the install README
#   make release-binary ARCH=arm64   one architecture's binary (also the Dockerfile's build step)

NFPM := bin/nfpm

# make install: node_exporter-like layout under PREFIX. The unit reads its
# flags from /etc/default/xpu_exporter whatever PREFIX is, so the flags file
# goes to SYSCONFDIR, not under PREFIX. systemd loads units from
# /usr/local/lib/systemd/system too.
PREFIX      ?= /usr/local
BINDIR      ?= $(PREFIX)/bin
UNITDIR     ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR ?= $(PREFIX)/lib/sysusers.d
SYSCONFDIR  ?= /etc
DESTDIR     ?=

DIST_ARCHES := amd64 arm64
DIST_STAGE   = dist/stage/linux-$(1)
# The unit of examples/systemd/ (reused, not copied), pointing at $(1)/xpu_exporter.
UNIT_SRC    := examples/systemd/xpu_exporter.service
ENV_SRC     := examples/systemd/xpu_exporter.default
SYSUSERS_SRC := packaging/xpu_exporter.sysusers
unit-for = sed 's|^ExecStart=/usr/local/bin/xpu_exporter |ExecStart=$(1)/xpu_exporter |' $(UNIT_SRC)

# cgo C compiler per target architecture: NVML is reached through cgo, so
# arm64 is cross-compiled with Debian's aarch64 cross gcc (installed on demand).
CC_amd64 := x86_64-linux-gnu-gcc
CC_arm64 := aarch64-linux-gnu-gcc
CROSS_PKG_arm64 := gcc-aarch64-linux-gnu libc6-dev-arm64-cross
CROSS_PKG_amd64 := gcc-x86-64-linux-gnu libc6-dev-amd64-cross
# Quiet when there is no go: sudo make install needs none (see $(BIN) below).
HOST_ARCH := $(shell $(GO) env GOARCH 2>/dev/null)

.PHONY: package-tools install uninstall release-binary dist packages package-check install-check readme-check

# nfpm at the version pinned by tools/go.mod, built once into bin/.
package-tools: $(NFPM)

$(NFPM): tools/go.mod tools/go.sum
	cd tools && $(GO) build -trimpath -ldflags '-s -w' -o ../$@ github.com/goreleaser/nfpm/v2/cmd/nfpm

## install: PREFIX/DESTDIR-aware, like node_exporter's. Never overwrites an
## existing flags file. Installs the binary make build wrote, and builds one
## only when there is none.
install: $(BIN)
	install -D -m 0755 $(BIN) $(DESTDIR)$(BINDIR)/xpu_exporter
	@mkdir -p $(DESTDIR)$(UNITDIR)
	$(call unit-for,$(BINDIR)) > $(DESTDIR)$(UNITDIR)/xpu_exporter.service
	@chmod 0644 $(DESTDIR)$(UNITDIR)/xpu_exporter.service
	install -D -m 0644 $(SYSUSERS_SRC) $(DESTDIR)$(SYSUSERSDIR)/xpu_exporter.conf
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/default/xpu_exporter ]; then \
	  echo "keeping $(DESTDIR)$(SYSCONFDIR)/default/xpu_exporter"; \
	else install -D -m 0644 $(ENV_SRC) $(DESTDIR)$(SYSCONFDIR)/default/xpu_exporter; fi

# The binary, when install finds none. install depends on this file, not
# on the phony build: README's `make build` then `sudo make install` would
# otherwise build again as root, leaving root-owned files in the checkout,
# or fail where sudo's PATH (secure_path) has no go.
$(BIN):
	$(MAKE) --no-print-directory build

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/xpu_exporter $(DESTDIR)$(UNITDIR)/xpu_exporter.service \
	  $(DESTDIR)$(SYSUSERSDIR)/xpu_exporter.conf
	@echo "kept $(DESTDIR)$(SYSCONFDIR)/default/xpu_exporter and the xpu_exporter user"

## release-binary ARCH=…: dist/stage/linux-$(ARCH)/ with the binary
## (stripped, -trimpath) and the packaged unit. Built natively on a host of that architecture, else with
## the cross gcc (installed through apt when missing). release-binary-ARCH
## is the same for a fixed ARCH.
ARCH ?= $(HOST_ARCH)
release-binary: release-binary-$(ARCH)

release-binary-%: build-deps
	@case "$*" in amd64|arm64) ;; *) echo "ARCH=$*: only amd64 and arm64" >&2; exit 1;; esac
	@mkdir -p $(call DIST_STAGE,$*)
	@cc=gcc; if [ "$*" != "$(HOST_ARCH)" ]; then cc=$(CC_$*); \
	  command -v $$cc >/dev/null 2>&1 || { echo "installing $(CROSS_PKG_$*) (cgo cross-compiler for $*)"; \
	    $(APT_INSTALL) $(CROSS_PKG_$*) >/dev/null; }; fi; \
	echo "GOOS=linux GOARCH=$* CC=$$cc $(GO) build -trimpath -o $(call DIST_STAGE,$*)/xpu_exporter ."; \
	GOOS=linux GOARCH=$* CC=$$cc $(GO) build -trimpath -ldflags '$(LDFLAGS) -s -w' -o $(call DIST_STAGE,$*)/xpu_exporter .
	$(call unit-for,/usr/bin) > $(call DIST_STAGE,$*)/xpu_exporter.service

# sha256sums.txt over every archive, chart and package in dist/.
write-checksums = cd dist && find . -maxdepth 1 -type f \( -name '*.tar.gz' -o -name '*.tgz' -o -name '*.deb' -o -name '*.rpm' \) \
	  -printf '%f\n' | LC_ALL=C sort | xargs -r sha256sum > sha256sums.txt && cat sha256sums.txt

## dist: the release archives (binary, systemd example files, sysusers file,
## README) per architecture, the packaged chart, and dist/sha256sums.txt.
dist: chart-package $(foreach a,$(DIST_ARCHES),dist-archive-$(a))
	$(write-checksums)

dist-archive-%: release-binary-%
	@d=dist/archive/xpu_exporter-$(VERSION).linux-$*; rm -rf $$d; mkdir -p $$d; \
	cp $(call DIST_STAGE,$*)/xpu_exporter $(UNIT_SRC) $(ENV_SRC) README.md $$d/ && \
	cp $(SYSUSERS_SRC) $$d/xpu_exporter.sysusers && \
	tar -C dist/archive --owner=0 --group=0 --sort=name -czf dist/xpu_exporter-$(VERSION).linux-$*.tar.gz xpu_exporter-$(VERSION).linux-$* && \
	echo "dist/xpu_exporter-$(VERSION).linux-$*.tar.gz"

## packages: deb and rpm per architecture, built by nfpm from packaging/nfpm.yaml.
packages: $(foreach a,$(DIST_ARCHES),package-$(a))
	$(write-checksums)

package-%: $(NFPM) release-binary-%
	@set -e; for p in deb rpm; do \
	  echo "ARCH=$* VERSION=$(VERSION) $(NFPM) package --config packaging/nfpm.yaml --packager $$p --target dist/"; \
	  ARCH=$* VERSION=$(VERSION) $(NFPM) package --config packaging/nfpm.yaml --packager $$p --target dist/; done

## package-check: the archives, packages and checksums hold what they must.
## rpm is inspected with rpm itself (Debian's rpm package, installed when
## missing).
package-check: dist packages
	@command -v rpm >/dev/null 2>&1 || { echo "installing rpm (to inspect the .rpm packages)"; $(APT_INSTALL) rpm >/dev/null; }
	VERSION=$(VERSION) packaging/package-check.sh

## install-check: make install and uninstall into a temporary DESTDIR.
install-check: build
	VERSION=$(VERSION) MAKE="$(MAKE) -f $(firstword $(MAKEFILE_LIST))" packaging/install-check.sh

## readme-check: every command of the "## Install" section of README_INSTALL
## run against the built artifacts, a temporary root and helm template (see
## the script).
README_INSTALL ?= README.md
README_TOOLS := systemctl:systemd systemd-analyze:systemd curl:curl promtool:prometheus rpm:rpm
readme-check: build $(HELM) dist packages
	@missing=; for dep in $(README_TOOLS); do \
	  command -v $${dep%%:*} >/dev/null 2>&1 || missing="$$missing $${dep#*:}"; done; \
	if [ -n "$$missing" ]; then echo "installing Debian packages:$$missing"; $(APT_INSTALL) $$missing >/dev/null; fi
	VERSION=$(VERSION) HELM=$(abspath $(HELM)) MAKE="$(MAKE) -f $(firstword $(MAKEFILE_LIST))" packaging/readme-check.sh $(README_INSTALL)

#!/usr/bin/env bash
# package-check.sh: what make dist and make packages built holds what it
# must. Run by `make package-check` from the repository root with VERSION set.
#   - sha256sums.txt lists every archive, chart and package, and matches;
#   - each archive: the binary for its architecture (ELF machine), the unit
#     and flags file of examples/systemd/ unchanged, the sysusers file, README;
#   - each .deb (dpkg-deb -I/-c) and .rpm (rpm -qip/-qlp, digests): the
#     binary for its architecture at /usr/bin, the unit at
#     /usr/lib/systemd/system starting /usr/bin/xpu_exporter and otherwise
#     identical to examples/systemd/, /etc/default/xpu_exporter as a config
#     file, the sysusers file, and maintainer scripts;
#   - the chart archive: Chart.yaml at VERSION, no tests or profiles.
set -euo pipefail
: "${VERSION:?}"
fail() { echo "package-check: $*" >&2; exit 1; }
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
n=0
ok() { n=$((n + 1)); echo "ok: $*"; }

# ELF machine of a binary: x86-64 or AArch64 (from the header, no `file` needed).
elf_machine() {
	case $(od -An -t x2 -j 18 -N 2 "$1" | tr -d ' ') in
	003e) echo amd64;; 00b7) echo arm64;; *) echo unknown;; esac
}
# The unit a package must carry: examples/systemd/'s, starting /usr/bin/xpu_exporter.
sed 's|^ExecStart=/usr/local/bin/xpu_exporter |ExecStart=/usr/bin/xpu_exporter |' examples/systemd/xpu_exporter.service >"$WORK/want.service"
grep -q '^ExecStart=/usr/bin/xpu_exporter \$XPU_EXPORTER_OPTS$' "$WORK/want.service" || fail "examples/systemd/xpu_exporter.service: ExecStart is not /usr/local/bin/xpu_exporter \$XPU_EXPORTER_OPTS"

cd dist
[ -s sha256sums.txt ] || fail "no dist/sha256sums.txt"
sha256sum --check --quiet sha256sums.txt || fail "sha256sums.txt does not match"
for f in *.tar.gz *.tgz *.deb *.rpm; do
	[ -e "$f" ] || continue
	grep -q "  $f\$" sha256sums.txt || fail "$f is not in sha256sums.txt"
done
ok "sha256sums.txt covers and matches $(wc -l <sha256sums.txt) files"

for arch in amd64 arm64; do
	a=xpu_exporter-$VERSION.linux-$arch
	[ -e "$a.tar.gz" ] || fail "no dist/$a.tar.gz"
	mkdir -p "$WORK/$arch"; tar -xzf "$a.tar.gz" -C "$WORK/$arch"
	got=$(cd "$WORK/$arch" && find . -type f | sort | tr '\n' ' ')
	want="./$a/README.md ./$a/xpu_exporter ./$a/xpu_exporter.default ./$a/xpu_exporter.service ./$a/xpu_exporter.sysusers "
	[ "$got" = "$want" ] || fail "$a.tar.gz holds $got, want $want"
	[ -x "$WORK/$arch/$a/xpu_exporter" ] || fail "$a: binary not executable"
	[ "$(elf_machine "$WORK/$arch/$a/xpu_exporter")" = "$arch" ] || fail "$a: binary is for $(elf_machine "$WORK/$arch/$a/xpu_exporter")"
	cmp -s "$WORK/$arch/$a/xpu_exporter.service" ../examples/systemd/xpu_exporter.service || fail "$a: unit differs from examples/systemd/"
	cmp -s "$WORK/$arch/$a/xpu_exporter.default" ../examples/systemd/xpu_exporter.default || fail "$a: flags file differs from examples/systemd/"
	ok "$a.tar.gz: $arch binary, unit, flags file, sysusers file, README"
done
# The native binary runs and reports the release's version.
native=$(go env GOARCH)
"$WORK/$native/xpu_exporter-$VERSION.linux-$native/xpu_exporter" --version 2>&1 | grep -q "version $VERSION" ||
	fail "the $native binary does not report version $VERSION"
ok "the $native binary runs and reports version $VERSION"

for arch in amd64 arm64; do
	deb=xpu-exporter_${VERSION}-1_$arch.deb
	[ -e "$deb" ] || fail "no dist/$deb"
	dpkg-deb -I "$deb" >"$WORK/deb.info"
	for field in "Package: xpu-exporter" "Version: $VERSION-1" "Architecture: $arch"; do
		grep -q "^ $field\$" "$WORK/deb.info" || fail "$deb: no '$field' in dpkg-deb -I"
	done
	dpkg-deb -c "$deb" | awk '{print $1, $NF}' >"$WORK/deb.list"
	for f in "-rwxr-xr-x ./usr/bin/xpu_exporter" "-rw-r--r-- ./usr/lib/systemd/system/xpu_exporter.service" \
		"-rw-r--r-- ./etc/default/xpu_exporter" "-rw-r--r-- ./usr/lib/sysusers.d/xpu_exporter.conf"; do
		grep -qx -- "$f" "$WORK/deb.list" || fail "$deb does not contain $f: $(cat "$WORK/deb.list")"
	done
	rm -rf "$WORK/deb"; dpkg-deb -R "$deb" "$WORK/deb"
	grep -qx /etc/default/xpu_exporter "$WORK/deb/DEBIAN/conffiles" || fail "$deb: /etc/default/xpu_exporter is not a conffile"
	for s in postinst prerm postrm; do [ -x "$WORK/deb/DEBIAN/$s" ] || fail "$deb: no $s"; sh -n "$WORK/deb/DEBIAN/$s"; done
	cmp -s "$WORK/deb/usr/lib/systemd/system/xpu_exporter.service" "$WORK/want.service" || fail "$deb: unit is not examples/systemd/'s with ExecStart=/usr/bin/xpu_exporter"
	cmp -s "$WORK/deb/etc/default/xpu_exporter" ../examples/systemd/xpu_exporter.default || fail "$deb: flags file differs"
	[ "$(elf_machine "$WORK/deb/usr/bin/xpu_exporter")" = "$arch" ] || fail "$deb: binary is for $(elf_machine "$WORK/deb/usr/bin/xpu_exporter")"
	ok "$deb: $arch binary, unit, conffile /etc/default/xpu_exporter, sysusers file, maintainer scripts"

	rarch=$([ "$arch" = amd64 ] && echo x86_64 || echo aarch64)
	rpm=xpu-exporter-${VERSION}-1.$rarch.rpm
	[ -e "$rpm" ] || fail "no dist/$rpm"
	rpm -K --nosignature "$rpm" >/dev/null || fail "$rpm: bad digests"
	[ "$(rpm -qp --qf '%{NAME} %{VERSION}-%{RELEASE} %{ARCH}' "$rpm")" = "xpu-exporter $VERSION-1 $rarch" ] || fail "$rpm: $(rpm -qip "$rpm")"
	rpm -qlp "$rpm" | sort >"$WORK/rpm.list"
	printf '%s\n' /etc/default/xpu_exporter /usr/bin/xpu_exporter /usr/lib/systemd/system/xpu_exporter.service /usr/lib/sysusers.d/xpu_exporter.conf | sort >"$WORK/rpm.want"
	diff "$WORK/rpm.want" "$WORK/rpm.list" || fail "$rpm files differ from the above"
	[ "$(rpm -qp --qf '[%{FILEFLAGS:fflags} %{FILENAMES}\n]' "$rpm" | grep '^c')" = "cn /etc/default/xpu_exporter" ] ||
		fail "$rpm: config files $(rpm -qp --qf '[%{FILEFLAGS:fflags} %{FILENAMES}\n]' "$rpm")"
	rpm -qp --qf '[%{FILEMODES:perms} %{FILENAMES}\n]' "$rpm" | grep -qx -- '-rwxr-xr-x /usr/bin/xpu_exporter' || fail "$rpm: binary mode"
	rpm -qp --scripts "$rpm" | grep -q 'systemd-sysusers' || fail "$rpm: no post-install script creating the user"
	ok "$rpm: $rarch, the same files, %config(noreplace) /etc/default/xpu_exporter, scripts"
done

chart=xpu-exporter-$VERSION.tgz
[ -e "$chart" ] || fail "no dist/$chart"
tar -tzf "$chart" >"$WORK/chart.list"
grep -qx 'xpu-exporter/Chart.yaml' "$WORK/chart.list" && grep -qx 'xpu-exporter/values.schema.json' "$WORK/chart.list" &&
	grep -q '^xpu-exporter/files/promrules/' "$WORK/chart.list" && grep -q '^xpu-exporter/files/dashboards/' "$WORK/chart.list" ||
	fail "$chart lacks Chart.yaml, the schema, rules or dashboards"
! grep -Eq '\.go$|\.mk$|/ci/' "$WORK/chart.list" || fail "$chart ships tests or profiles: $(grep -E '\.go$|\.mk$|/ci/' "$WORK/chart.list")"
tar -xzOf "$chart" xpu-exporter/Chart.yaml | grep -qx "version: $VERSION" || fail "$chart: not version $VERSION"
ok "$chart: Chart.yaml $VERSION, schema, rules, dashboards, no tests"
echo "package-check: $n passed, 0 failed"

#!/usr/bin/env bash
# install-check.sh: make install and make uninstall into temporary DESTDIRs.
# Run by `make install-check` from the repository root with MAKE set.
#   - PREFIX=/usr/local (default): binary, unit (ExecStart under PREFIX, else
#     examples/systemd/'s unit), sysusers file, /etc/default flags file;
#   - the unit passes systemd-analyze verify, enables with systemctl --root,
#     and the sysusers file creates the user with systemd-sysusers --root;
#   - a changed flags file survives a second install;
#   - make install installs the binary there is without building again, and
#     builds one only when there is none;
#   - PREFIX=/usr puts the binary in /usr/bin and the unit starts it there;
#   - make uninstall removes all but the flags file.
set -euo pipefail
MAKE=${MAKE:-make}
fail() { echo "install-check: $*" >&2; exit 1; }
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
n=0
ok() { n=$((n + 1)); echo "ok: $*"; }
D=$WORK/root

$MAKE --no-print-directory install DESTDIR="$D" >/dev/null
for f in usr/local/bin/xpu_exporter usr/local/lib/systemd/system/xpu_exporter.service usr/local/lib/sysusers.d/xpu_exporter.conf etc/default/xpu_exporter; do
	[ -f "$D/$f" ] || fail "make install did not install /$f: $(cd "$D" && find . -type f)"
done
[ "$(stat -c %a "$D/usr/local/bin/xpu_exporter")" = 755 ] || fail "binary mode"
[ "$(stat -c %a "$D/usr/local/lib/systemd/system/xpu_exporter.service")" = 644 ] || fail "unit mode"
"$D/usr/local/bin/xpu_exporter" --version >/dev/null 2>&1 || fail "installed binary does not run"
cmp -s "$D/usr/local/lib/systemd/system/xpu_exporter.service" examples/systemd/xpu_exporter.service || fail "unit differs from examples/systemd/"
cmp -s "$D/etc/default/xpu_exporter" examples/systemd/xpu_exporter.default || fail "flags file differs from examples/systemd/"
ok "make install: binary, unit, sysusers file, flags file under DESTDIR"

sed "s|^ExecStart=/|ExecStart=$D/|" "$D/usr/local/lib/systemd/system/xpu_exporter.service" >"$WORK/xpu_exporter.service"
out=$(systemd-analyze verify "$WORK/xpu_exporter.service" 2>&1) || fail "systemd-analyze verify: $out"
! printf '%s' "$out" | grep -Eq 'Unknown|ignoring|Failed|not executable' || fail "systemd-analyze verify: $out"
echo "  exposure: $(systemd-analyze security --offline=yes "$WORK/xpu_exporter.service" 2>/dev/null | tail -1)"
ok "the unit passes systemd-analyze verify"

: >"$D/etc/passwd"; : >"$D/etc/group"
systemd-sysusers --root="$D" "$D/usr/local/lib/sysusers.d/xpu_exporter.conf" 2>/dev/null
grep -q '^xpu_exporter:x:[0-9]*:[0-9]*:.*:/usr/sbin/nologin$' "$D/etc/passwd" || fail "systemd-sysusers made no xpu_exporter user: $(cat "$D/etc/passwd")"
user=$(sed -n 's/^User=//p' "$D/usr/local/lib/systemd/system/xpu_exporter.service")
[ "$user" = xpu_exporter ] || fail "the unit runs as $user, the sysusers file creates xpu_exporter"
systemctl --root="$D" enable xpu_exporter.service >/dev/null 2>&1
[ -L "$D/etc/systemd/system/multi-user.target.wants/xpu_exporter.service" ] || fail "systemctl --root enable made no link"
ok "systemd-sysusers creates the unit's user; systemctl enables the unit"

echo 'XPU_EXPORTER_OPTS="--web.listen-address=:9100"' >"$D/etc/default/xpu_exporter"
$MAKE --no-print-directory install DESTDIR="$D" >/dev/null
grep -q 9100 "$D/etc/default/xpu_exporter" || fail "a second make install overwrote the changed flags file"
ok "a changed flags file survives make install"

# README: make build, then sudo make install, which must not build again
# as root (sudo's PATH may have no go). make -n prints what would run,
# a sub-make's commands included.
out=$($MAKE --no-print-directory -n install DESTDIR="$D")
! printf '%s' "$out" | grep -q 'go build' || fail "make install builds again although there is a binary: $out"
out=$($MAKE --no-print-directory -n install DESTDIR="$D" BIN="$WORK/none/xpu_exporter")
printf '%s' "$out" | grep -q 'go build' || fail "make install without a binary does not build one: $out"
ok "make install installs the binary there is, and builds one only when there is none"

$MAKE --no-print-directory uninstall DESTDIR="$D" >/dev/null
left=$(cd "$D" && find . -type f -path './usr/*')
[ -z "$left" ] || fail "make uninstall left $left"
[ -f "$D/etc/default/xpu_exporter" ] || fail "make uninstall removed the flags file"
ok "make uninstall removes binary, unit and sysusers file, keeps the flags file"

D2=$WORK/usr
$MAKE --no-print-directory install DESTDIR="$D2" PREFIX=/usr >/dev/null
[ -x "$D2/usr/bin/xpu_exporter" ] || fail "PREFIX=/usr: no /usr/bin/xpu_exporter"
grep -qx 'ExecStart=/usr/bin/xpu_exporter $XPU_EXPORTER_OPTS' "$D2/usr/lib/systemd/system/xpu_exporter.service" || fail "PREFIX=/usr: unit does not start /usr/bin/xpu_exporter"
ok "PREFIX=/usr: /usr/bin/xpu_exporter, /usr/lib/systemd/system unit starting it"
echo "install-check: $n passed, 0 failed"

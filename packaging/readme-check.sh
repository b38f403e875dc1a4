#!/usr/bin/env bash
# readme-check.sh README: runs every command of the "## Install" section of
# README (all of it when it has no second-level heading), so that none can
# rot. Called by `make readme-check` from the repository root, after
# `make build dist packages`, with VERSION, HELM and MAKE set.
#
# Each ```sh block runs in bash -e, line by line as written, in a sandbox:
#   - sudo, systemctl, systemd-sysusers, apt, dnf, make, helm, kubectl and
#     curl are stand-ins (executables first on PATH) that do the real thing
#     where it can be done without a cluster or without touching this
#     machine, and check the command where it cannot:
#       sudo install/make/rm   real, with absolute paths moved under $ROOT;
#                              go fails under sudo, whose secure_path
#                              usually has none (make install must not
#                              build again as root)
#       systemd-sysusers       real, with --root=$ROOT
#       systemctl enable/disable  real, with --root=$ROOT; --now, start and
#                              restart run the installed binary as the
#                              installed unit says (ExecStart, EnvironmentFile,
#                              User must exist in $ROOT/etc/passwd) in --demo
#                              mode on a free port; every unit passes
#                              systemd-analyze verify
#       apt install ./x.deb    apt-get --simulate, then unpack into $ROOT and
#                              run the package's maintainer scripts
#       dnf install ./x.rpm    rpm digests and a test transaction in a
#                              temporary rpm database; same files as the deb
#       helm install/upgrade   helm template with the same chart and flags
#       helm uninstall         the release must have been installed
#       kubectl                checked against the rendered objects
#                              (packaging/internal/kubectlcheck)
#       curl localhost:9835    real, against the exporter started above
#   - tar, sha256sum, cd, grep, sleep, kill run as they are, in a copy of
#     dist/ for the blocks that use release files, else in the repository;
#     a test of an absolute path ([ -e /etc/...) looks under $ROOT.
#   - a block that installs and starts the service is run a second time, as
#     the upgrade README describes ("the same way"), over a changed
#     /etc/default/xpu_exporter, which must survive.
#   - a command whose program is not in that list fails the check: add a way
#     to exercise it here first.
# Each ```yaml block with scrape_configs passes promtool check config (a
# kubernetes_sd_configs job is checked by kubectlcheck, as Debian's promtool
# lacks Kubernetes discovery).
set -euo pipefail

readme=${1:?usage: readme-check.sh README}
: "${VERSION:?}" "${HELM:?}"
MAKE=${MAKE:-make}
REPO=$(pwd)
WORK=$(mktemp -d)
ROOT=$WORK/root
STUBS=$WORK/stubs
STATE=$WORK/k8s
DOWNLOADS=$WORK/downloads

cleanup() {
	for f in "$WORK"/*.pid; do
		# shellcheck disable=SC2046
		[ -e "$f" ] && kill $(cat "$f") 2>/dev/null || :
	done
	rm -rf "$WORK"
}
trap cleanup EXIT

fail() { echo "readme-check: $*" >&2; exit 1; }

for f in "xpu_exporter-$VERSION.linux-amd64.tar.gz" "xpu-exporter-$VERSION.tgz" sha256sums.txt \
	"xpu-exporter_${VERSION}-1_amd64.deb" "xpu-exporter-${VERSION}-1.x86_64.rpm"; do
	[ -e "dist/$f" ] || fail "dist/$f missing: run make dist packages first"
done
mkdir -p "$STUBS" "$STATE" "$DOWNLOADS" "$WORK/blocks"
cp -a dist/*.tar.gz dist/*.tgz dist/*.deb dist/*.rpm dist/sha256sums.txt "$DOWNLOADS/"

# A free local port for the exporter that stands in for the README's 9835
# (which another exporter on this machine may hold). It lies below the
# kernel's ephemeral range (ip_local_port_range), from which every
# connection's source port and every bind to port 0 is drawn: the demo's
# engine servers and the curls of this check would otherwise be able to
# take it while the service restarts, and the next start would fail.
ephemeral_low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
PORT=
for _ in $(seq 50); do
	p=$(shuf -i "20000-$((ephemeral_low > 20100 ? ephemeral_low - 1 : 20099))" -n 1)
	# Refused: nothing listens there.
	if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then PORT=$p; break; fi
done
[ -n "$PORT" ] || fail "no free port below $ephemeral_low"

new_root() {
	rm -rf "$ROOT" "$WORK/pkgs" "$WORK/rpmdb"
	mkdir -p "$ROOT"/{etc/default,etc/systemd/system,etc/sysusers.d,usr/bin,usr/local/bin,usr/lib/systemd/system,usr/lib/sysusers.d,usr/sbin} "$WORK/pkgs"
	: >"$ROOT/etc/passwd"
	: >"$ROOT/etc/group"
}

# Real programs, found before the stand-ins go first on PATH.
read -r -a mk <<<"$MAKE"
mk[0]=$(command -v "${mk[0]}")
MAKE="${mk[*]}"
export REAL_SYSTEMCTL=$(command -v systemctl) REAL_SYSUSERS=$(command -v systemd-sysusers) \
	REAL_CURL=$(command -v curl) REAL_ANALYZE=$(command -v systemd-analyze) REAL_APT_GET=$(command -v apt-get)
export REPO WORK ROOT STUBS STATE PORT HELM MAKE VERSION

go build -o "$STUBS/.kubectlcheck" ./packaging/internal/kubectlcheck

# --- stand-ins -------------------------------------------------------------

cat >"$STUBS/.lib" <<'EOF'
# Shared by the stand-ins.
die() { echo "readme-check ($(basename "$0")): $*" >&2; exit 1; }
unit_file() { # the unit systemd would load, by its search order
	local u=$1 d
	for d in etc/systemd/system usr/local/lib/systemd/system usr/lib/systemd/system; do
		[ -e "$ROOT/$d/$u" ] && { echo "$ROOT/$d/$u"; return; }
	done
	die "no unit $u in the root"
}
verify_unit() { # systemd-analyze verify, its ExecStart moved under $ROOT
	local f=$1 tmp out
	tmp=$(mktemp -d)
	sed "s|^ExecStart=/|ExecStart=$ROOT/|" "$f" >"$tmp/$(basename "$f")"
	out=$("$REAL_ANALYZE" verify "$tmp/$(basename "$f")" 2>&1) || die "systemd-analyze verify $f: $out"
	rm -rf "$tmp"
	if printf '%s' "$out" | grep -Eq 'Unknown|ignoring|Failed|not executable|No such'; then die "systemd-analyze verify $f: $out"; fi
}
alive() { # a zombie, where PID 1 reaps no orphans (containers), is gone
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	stat=${stat##*) }
	[ "${stat:0:1}" != Z ]
}
running() { [ -e "$WORK/service.pid" ] && alive "$(cat "$WORK/service.pid")"; }
stop_service() {
	if running; then kill "$(cat "$WORK/service.pid")"; wait_gone; fi
	rm -f "$WORK/service.pid"
}
wait_gone() { # the exporter's shutdown takes at most 7 s (main.go, shutdownGrace and shutdownDrain)
	local i
	for i in $(seq 100); do running || return 0; sleep 0.1; done
	die "the service still runs 10 s after SIGTERM: $(tail -n 5 "$WORK/service.log")"
}
start_service() { # as systemd would: ExecStart with the EnvironmentFile's variables, as User
	local u=$1 f exec envfile user opts bin i
	f=$(unit_file "$u")
	verify_unit "$f"
	exec=$(sed -n 's/^ExecStart=//p' "$f")
	envfile=$(sed -n 's/^EnvironmentFile=-\{0,1\}//p' "$f")
	user=$(sed -n 's/^User=//p' "$f")
	[ -z "$user" ] || grep -q "^$user:" "$ROOT/etc/passwd" || die "$u runs as $user, who does not exist (was systemd-sysusers run?)"
	opts=$( [ -z "$envfile" ] || [ ! -e "$ROOT$envfile" ] || { set -a; . "$ROOT$envfile"; printf '%s' "${XPU_EXPORTER_OPTS:-}"; } )
	bin=${exec%% *}
	[ -x "$ROOT$bin" ] || die "$u: ExecStart $bin is not installed"
	case $exec in *'$XPU_EXPORTER_OPTS'*) ;; *) die "$u: ExecStart does not pass \$XPU_EXPORTER_OPTS";; esac
	stop_service
	# No GPU here: --demo; the README's port 9835 becomes $PORT.
	# shellcheck disable=SC2086
	"$ROOT$bin" ${opts//:9835/127.0.0.1:$PORT} --demo >"$WORK/service.log" 2>&1 &
	echo $! >"$WORK/service.pid"
	for i in $(seq 100); do
		"$REAL_CURL" -fso /dev/null "http://127.0.0.1:$PORT/metrics" && return 0
		running || die "$u exited: $(cat "$WORK/service.log")"
		sleep 0.1
	done
	die "$u does not answer on its port"
}
EOF

cat >"$STUBS/sudo" <<'EOF'
#!/usr/bin/env bash
# sudo: the command as root, with absolute paths under $ROOT, and no go.
. "$STUBS/.lib"
export PATH="$STUBS/sudo-path:$PATH"
cmd=$1; shift
case $cmd in
install|rm)
	args=()
	for a in "$@"; do case $a in /*) args+=("$ROOT$a");; *) args+=("$a");; esac; done
	exec "$cmd" "${args[@]}";;
make) exec "$STUBS/make" "$@" DESTDIR="$ROOT";;
systemctl|systemd-sysusers|apt|dnf) exec "$STUBS/$cmd" "$@";;
*) die "sudo $cmd: no way to exercise it";;
esac
EOF

# go as sudo finds it: sudo's secure_path (/usr/local/sbin:/usr/local/bin:
# /usr/sbin:/usr/bin:/sbin:/bin) lacks Go's /usr/local/go/bin, and where it
# has a go, a build as root leaves root-owned files in the checkout.
mkdir -p "$STUBS/sudo-path"
cat >"$STUBS/sudo-path/go" <<'EOF'
#!/usr/bin/env bash
. "$STUBS/.lib"
die "go $*, run through sudo: sudo's PATH usually has no go, and a build as root leaves root-owned files"
EOF

cat >"$STUBS/make" <<'EOF'
#!/usr/bin/env bash
# make: the repository's make (with the makefile make readme-check runs from).
. "$STUBS/.lib"
case "$1" in build|install|uninstall) ;; *) die "make $1: no way to exercise it";; esac
[ "$PWD" = "$REPO" ] || die "make outside the repository ($PWD)"
# shellcheck disable=SC2086
exec $MAKE --no-print-directory "$@"
EOF

cat >"$STUBS/systemd-sysusers" <<'EOF'
#!/usr/bin/env bash
. "$STUBS/.lib"
args=()
for a in "$@"; do case $a in /*) args+=("$ROOT$a");; *) args+=("$a");; esac; done
exec "$REAL_SYSUSERS" --root="$ROOT" "${args[@]}"
EOF

cat >"$STUBS/systemctl" <<'EOF'
#!/usr/bin/env bash
. "$STUBS/.lib"
now=; args=()
for a in "$@"; do case $a in --now) now=1;; -*) die "systemctl $a: not exercised";; *) args+=("$a");; esac; done
verb=${args[0]:-}; unit=${args[1]:-}
case $unit in ''|*.*) ;; *) unit=$unit.service;; esac
case $verb in
daemon-reload)
	for f in "$ROOT"/etc/systemd/system/xpu_exporter.service "$ROOT"/usr/local/lib/systemd/system/xpu_exporter.service "$ROOT"/usr/lib/systemd/system/xpu_exporter.service; do
		[ -e "$f" ] && verify_unit "$f"
	done; :;;
enable)  "$REAL_SYSTEMCTL" --root="$ROOT" enable "$unit" 2>&1 | grep -v 'non-existent unit' || :
	[ -L "$ROOT/etc/systemd/system/multi-user.target.wants/$unit" ] || die "enable $unit made no multi-user.target.wants link"
	[ -z "$now" ] || start_service "$unit";;
disable) "$REAL_SYSTEMCTL" --root="$ROOT" disable "$unit" >/dev/null 2>&1
	[ ! -e "$ROOT/etc/systemd/system/multi-user.target.wants/$unit" ] || die "disable $unit left it enabled"
	[ -z "$now" ] || stop_service;;
start|restart) start_service "$unit";;
try-restart) if running; then start_service "$unit"; fi;;
stop) stop_service;;
*) die "systemctl $verb: not exercised";;
esac
EOF

cat >"$STUBS/apt" <<'EOF'
#!/usr/bin/env bash
# apt install ./x.deb: resolve with apt-get --simulate, unpack into $ROOT
# (keeping a changed conffile, as dpkg does) and run the maintainer scripts.
# apt remove NAME: prerm, remove the package's files but its conffiles, postrm.
. "$STUBS/.lib"
verb=$1; shift
case $verb in
install)
	for deb in "$@"; do
		[ -e "$deb" ] || die "no $deb"
		pkg=$(dpkg-deb -f "$deb" Package); arch=$(dpkg-deb -f "$deb" Architecture)
		[ "$arch" = "$(dpkg --print-architecture)" ] || die "$deb is for $arch"
		"$REAL_APT_GET" install --simulate --no-install-recommends "$(realpath "$deb")" >/dev/null || die "apt-get cannot install $deb"
		ctl=$WORK/pkgs/$pkg.control; rm -rf "$ctl"; dpkg-deb -e "$deb" "$ctl"
		old=; [ -e "$WORK/pkgs/$pkg.version" ] && old=$(cat "$WORK/pkgs/$pkg.version")
		keep=$WORK/pkgs/conffiles; rm -rf "$keep"; mkdir -p "$keep"
		while read -r c; do [ -e "$ROOT$c" ] && cp -a "$ROOT$c" "$keep/$(basename "$c")"; done <"$ctl/conffiles"
		[ -z "$old" ] || [ ! -x "$ctl/prerm" ] || sh "$ctl/prerm" upgrade "$(dpkg-deb -f "$deb" Version)"
		dpkg-deb -x "$deb" "$ROOT"
		while read -r c; do [ -e "$keep/$(basename "$c")" ] && cp -a "$keep/$(basename "$c")" "$ROOT$c"; done <"$ctl/conffiles"
		dpkg-deb -c "$deb" | awk '{print $NF}' | sed 's|^\./|/|' >"$WORK/pkgs/$pkg.list"
		dpkg-deb -f "$deb" Version >"$WORK/pkgs/$pkg.version"
		# The scripts see this machine's /: their file arguments are rewritten
		# by the stand-ins they call.
		[ ! -x "$ctl/postinst" ] || sh "$ctl/postinst" configure $old || die "postinst failed"
		echo "installed $pkg $(cat "$WORK/pkgs/$pkg.version") into the root"
	done;;
remove)
	for pkg in "$@"; do
		[ -e "$WORK/pkgs/$pkg.list" ] || die "package $pkg was not installed"
		ctl=$WORK/pkgs/$pkg.control
		[ ! -x "$ctl/prerm" ] || sh "$ctl/prerm" remove
		while read -r f; do
			grep -qx "$f" "$ctl/conffiles" && continue
			[ -f "$ROOT$f" ] || [ -L "$ROOT$f" ] && rm -f "$ROOT$f"
		done <"$WORK/pkgs/$pkg.list"
		[ ! -x "$ctl/postrm" ] || sh "$ctl/postrm" remove
		rm -f "$WORK/pkgs/$pkg.list" "$WORK/pkgs/$pkg.version"
		[ ! -e "$ROOT/usr/bin/xpu_exporter" ] || die "remove left /usr/bin/xpu_exporter"
		echo "removed $pkg from the root"
	done;;
*) die "apt $verb: not exercised";;
esac
EOF

cat >"$STUBS/dnf" <<'EOF'
#!/usr/bin/env bash
# dnf install ./x.rpm: digests, a test transaction in a temporary rpm
# database, and the same files as the deb. dnf remove NAME: an rpm of that
# name was installed.
. "$STUBS/.lib"
verb=$1; shift
case $verb in
install)
	for rpm in "$@"; do
		[ -e "$rpm" ] || die "no $rpm"
		rpm -K --nosignature "$rpm" >/dev/null || die "$rpm: bad digests"
		mkdir -p "$WORK/rpmdb"; rpm --dbpath "$WORK/rpmdb" --initdb
		# (Debian's rpm warns that it is not Debian's package manager.)
		out=$(rpm --dbpath "$WORK/rpmdb" -i --test --nodeps --noscripts "$rpm" 2>&1) || die "rpm refuses $rpm: $out"
		printf '%s\n' "$out" | grep -v -e Alien -e 'what you are doing' || :
		name=$(rpm -qp --qf '%{NAME}' "$rpm")
		deb=$(ls "$(dirname "$rpm")"/"${name}"_*_amd64.deb | head -1)
		diff <(rpm -qlp "$rpm" | sort) <(dpkg-deb -c "$deb" | awk '$1 !~ /^d/ {print $NF}' | sed 's|^\./|/|' | sort) ||
			die "$rpm and $deb install different files"
		touch "$WORK/pkgs/$name.rpm"
		echo "rpm would install $name: $(rpm -qp --qf '%{VERSION}-%{RELEASE}.%{ARCH}' "$rpm")"
	done;;
remove)
	for name in "$@"; do
		for r in "$REPO"/dist/*.rpm; do [ "$(rpm -qp --qf '%{NAME}' "$r")" = "$name" ] && { echo "rpm $name would be removed"; exit 0; }; done
		die "no rpm named $name"
	done;;
*) die "dnf $verb: not exercised";;
esac
EOF

cat >"$STUBS/helm" <<'EOF'
#!/usr/bin/env bash
# helm install/upgrade: helm template with the same chart and flags, the
# rendering kept for kubectl; helm uninstall: the release was installed.
. "$STUBS/.lib"
verb=$1; shift
case $verb in
install|upgrade)
	release=$1; chart=$2; shift 2
	ns=default; args=()
	while [ $# -gt 0 ]; do
		case $1 in
		--create-namespace|--reset-then-reuse-values|--reuse-values|--wait|--atomic|--install) ;;
		--namespace|-n) ns=$2; args+=("$1" "$2"); shift;;
		*) args+=("$1");;
		esac
		shift
	done
	if [ "$verb" = upgrade ]; then [ -e "$STATE/$release.yaml" ] || die "upgrade of $release, which is not installed"; fi
	"$HELM" lint --strict --quiet "$chart" "${args[@]}" >/dev/null || die "helm lint $chart ${args[*]}"
	"$HELM" template "$release" "$chart" "${args[@]}" >"$STATE/$release.yaml" || die "helm template $release $chart ${args[*]}"
	echo "$ns" >"$STATE/$release.namespace"
	echo "$verb $release: $(grep -c '^kind:' "$STATE/$release.yaml") objects in namespace $ns (rendered offline)";;
uninstall)
	release=$1; shift; ns=default
	[ "${1:-}" = --namespace ] && ns=$2
	[ -e "$STATE/$release.yaml" ] || die "uninstall of $release, which is not installed"
	[ "$(cat "$STATE/$release.namespace")" = "$ns" ] || die "$release is in namespace $(cat "$STATE/$release.namespace"), not $ns"
	rm -f "$STATE/$release.yaml" "$STATE/$release.namespace"
	echo "release \"$release\" uninstalled (checked offline)";;
*) exec "$HELM" "$verb" "$@";;
esac
EOF

cat >"$STUBS/kubectl" <<'EOF'
#!/usr/bin/env bash
# kubectl: checked against the rendered objects. port-forward also starts
# an exporter (--demo) on the forwarded port, standing in for the pod, and
# stops it when killed.
. "$STUBS/.lib"
"$STUBS/.kubectlcheck" -state "$STATE" -- "$@" || exit 1
for a in "$@"; do
	if [ "$a" = port-forward ]; then
		"$REPO/xpu_exporter" --demo --web.listen-address="127.0.0.1:$PORT" >"$WORK/port-forward.log" 2>&1 &
		pid=$!
		sleep 600 &
		spid=$!
		echo "$pid $spid" >"$WORK/port-forward.pid"
		trap 'kill $pid $spid; wait $pid 2>/dev/null; rm -f "$WORK/port-forward.pid"; exit 0' TERM INT
		wait $spid
	fi
done
EOF

cat >"$STUBS/curl" <<'EOF'
#!/usr/bin/env bash
# curl: localhost:9835 is the exporter the README started, on $PORT.
args=()
for a in "$@"; do args+=("${a//localhost:9835/127.0.0.1:$PORT}"); done
exec "$REAL_CURL" --retry 20 --retry-connrefused --retry-delay 1 "${args[@]}"
EOF
chmod +x "$STUBS"/* "$STUBS"/sudo-path/go

# --- the README's blocks ---------------------------------------------------

# Split the fenced blocks of the "## Install" section (up to the next
# second-level heading; the whole file when it has none) into blocks/NNN.sh
# and blocks/NNN.yaml.
awk -v dir="$WORK/blocks" '
	FNR == 1 { whole = 1 }
	/^## / { whole = 0; insec = ($0 ~ /^## Install[ \t]*$/); next }
	!(whole || insec) { next }
	/^```(sh|yaml)[ \t]*$/ { n++; lang = substr($0, 4); sub(/[ \t]+$/, "", lang); f = sprintf("%s/%03d.%s", dir, n, lang); inb = 1; next }
	/^```/ && inb { inb = 0; close(f); next }
	inb { print > f }
' "$readme"

# Programs a README command may run, and the ones it may run through sudo.
allowed=" helm kubectl curl grep sleep kill sha256sum tar cd make sudo [ "
allowed_sudo=" install make systemctl systemd-sysusers apt dnf rm "

# run_block SCRIPT DIR: the block in DIR with the stand-ins, bash -e
# stopping at the first failure, which it names with its line as the README
# has it; tests of absolute paths look under $ROOT. Its standard error goes
# to $WORK/block.err as well.
run_block() {
	local rc=0
	(cd "$2" && PATH="$STUBS:$PATH" bash -e -o pipefail <(
		printf "trap 'echo \"readme-check: exit \$? at: \$(sed -n \"\$((LINENO - 1))p\" %q)\" >&2' ERR\n" "$1"
		sed -E 's#(\[ +-[a-z] +)/#\1$ROOT/#g' "$1")) 2>"$WORK/block.err" || rc=$?
	cat "$WORK/block.err" >&2
	# A block that stopped before its `kill %1` leaves the port-forward
	# running, on the port the next block's service needs.
	if [ -e "$WORK/port-forward.pid" ]; then
		local pids _
		read -r -a pids <"$WORK/port-forward.pid"
		kill "${pids[@]}" 2>/dev/null || :
		for _ in $(seq 100); do alive "${pids[0]}" || break; sleep 0.1; done
		rm -f "$WORK/port-forward.pid"
	fi
	return $rc
}

# failure WHAT SCRIPT: WHAT, the block's standard error and the log of the
# exporter it started, kept for the end of the output, which is the part a
# CI log shows.
failure() {
	local log=$WORK/service.log
	grep -q port-forward "$2" && log=$WORK/port-forward.log
	failed=$((failed + 1))
	echo "$1" >&2
	{
		echo "- $1"
		tail -n 20 "$WORK/block.err" | sed 's/^/    /'
		[ ! -s "$log" ] || { echo "    the log of the exporter it started last:"; tail -n 20 "$log" | sed 's/^/      /'; }
	} >>"$WORK/failures"
}

. "$STUBS/.lib"
passed=0
failed=0
for block in "$WORK"/blocks/*; do
	case $block in
	*.yaml)
		grep -q '^scrape_configs:' "$block" || continue
		echo "== promtool check config (README block $(basename "$block"))"
		if grep -q kubernetes_sd_configs "$block"; then
			# Debian's promtool has no Kubernetes discovery: check that part
			# against the rendered pods, and the rest with promtool.
			"$STUBS/.kubectlcheck" -state "$STATE" -scrape-config "$block" || fail "scrape config $(basename "$block")"
			sed 's/^\(\s*\)kubernetes_sd_configs:/\1static_configs: [{targets: ["gpu-node-01:9835"]}]\n\1x_kubernetes_sd_configs:/' "$block" |
				awk '/x_kubernetes_sd_configs:/ {skip=1; ind=match($0,/[^ ]/); next} skip && match($0,/[^ ]/) > ind {next} {skip=0; print}' >"$WORK/prometheus.yml"
		else
			cp "$block" "$WORK/prometheus.yml"
		fi
		promtool check config "$WORK/prometheus.yml" || fail "scrape config $(basename "$block")"
		passed=$((passed + 1))
		continue;;
	esac
	# Join continuation lines, drop comments and blank lines.
	script=$WORK/$(basename "$block").run
	sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$block" | sed -e 's/[[:space:]]#.*$//' -e '/^[[:space:]]*#/d' -e '/^[[:space:]]*$/d' >"$script"
	# Every program must be one this script knows how to exercise.
	while IFS= read -r line; do
		IFS='|&;' read -r -a parts <<<"$line"
		for part in "${parts[@]}"; do
			read -r -a words <<<"$part"
			[ ${#words[@]} -gt 0 ] || continue
			prog=${words[0]}
			case $allowed in *" $prog "*) ;; *) fail "no way to exercise '$prog' in: $line";; esac
			if [ "$prog" = sudo ]; then
				case $allowed_sudo in *" ${words[1]} "*) ;; *) fail "no way to exercise 'sudo ${words[1]}' in: $line";; esac
			fi
		done
	done <"$script"
	# Blocks that use release files run in a copy of dist/, as after a
	# download; the others in the repository. A block that installs and
	# starts the service starts on a fresh machine.
	dir=$REPO
	grep -Eq '\.(deb|rpm|tar\.gz)|sha256sums' "$script" && dir=$DOWNLOADS
	if grep -q 'enable --now' "$script"; then
		"$STUBS/systemctl" stop || :
		new_root
	fi
	[ -d "$ROOT" ] || new_root
	echo "== README block $(basename "$block") (in ${dir/#$WORK/\$WORK})"
	sed 's/^/  $ /' "$script"
	if run_block "$script" "$dir"; then
		passed=$((passed + $(wc -l <"$script")))
	else
		failure "README block $(basename "$block") failed" "$script"
		continue
	fi
	# An install writes the flags file; an upgrade is the same install
	# again, and the site's flags stay.
	flags=$ROOT/etc/default/xpu_exporter
	if grep -q 'enable --now' "$script"; then
		if [ ! -e "$flags" ]; then
			failure "README block $(basename "$block") installed no /etc/default/xpu_exporter" "$script"
			continue
		fi
		changed='XPU_EXPORTER_OPTS="--web.listen-address=:9835 --log.level=debug"'
		echo "$changed" >"$flags"
		echo "== README block $(basename "$block") again, as an upgrade over a changed /etc/default/xpu_exporter"
		if ! run_block "$script" "$dir" >/dev/null; then
			failure "README block $(basename "$block"), run again as an upgrade, failed" "$script"
		elif ! grep -qxF "$changed" "$flags"; then
			failure "README block $(basename "$block"), run again as an upgrade, did not keep /etc/default/xpu_exporter: $(cat "$flags")" "$script"
		else
			passed=$((passed + 1))
		fi
	fi
done
echo "readme-check: $passed passed, $failed failed"
[ ! -e "$WORK/failures" ] || cat "$WORK/failures"
[ "$failed" = 0 ]

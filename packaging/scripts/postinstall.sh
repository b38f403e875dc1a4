#!/bin/sh
# Package post-install (deb: configure [old-version]; rpm: 1 install, 2 upgrade).
# Creates the xpu_exporter user, reloads systemd, and restarts the service on
# upgrade if it was running. A new install is not started: see README.
set -e
if command -v systemd-sysusers >/dev/null 2>&1; then
	systemd-sysusers /usr/lib/sysusers.d/xpu_exporter.conf
elif ! getent passwd xpu_exporter >/dev/null; then
	useradd --system --no-create-home --home-dir / --shell /usr/sbin/nologin --user-group xpu_exporter
fi
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || :
	case "$1" in
	configure) [ -z "$2" ] || systemctl try-restart xpu_exporter.service || : ;;
	2) systemctl try-restart xpu_exporter.service || : ;;
	esac
fi
exit 0

#!/bin/sh
# Package pre-remove (deb: remove | upgrade …; rpm: 0 remove, 1 upgrade).
# Stops and disables the service on removal only; an upgrade keeps it running.
set -e
case "$1" in
remove|0)
	if [ -d /run/systemd/system ]; then
		systemctl disable --now xpu_exporter.service || :
	fi
	;;
esac
exit 0

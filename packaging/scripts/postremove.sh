#!/bin/sh
# Package post-remove: let systemd forget the removed unit. The user and
# /etc/default/xpu_exporter (deb: until purge) are left in place.
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || :
fi
exit 0

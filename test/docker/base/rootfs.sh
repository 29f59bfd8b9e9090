#!/usr/bin/env bash
# Debootstraps a slim Debian bookworm root filesystem (minbase, no docs, man pages or locales, as Debian's -slim
# images) and writes it as a tar archive to $1. Runs as root. Used by build.sh; its hash names the imported image.
set -euo pipefail
out=$1
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
rootfs="$out.d"
rm -rf "$rootfs"
debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$out.log" 2>&1 || {
  tail -n 30 "$out.log" >&2
  exit 1
}
cat >"$rootfs/etc/dpkg/dpkg.cfg.d/docker-slim" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
CFG
printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' >"$rootfs/etc/apt/apt.conf.d/docker-slim"
find "$rootfs/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete 2>/dev/null || true
rm -rf "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/* \
  "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb \
  "$rootfs"/var/log/* "$rootfs"/tmp/*
printf 'deb %s bookworm main\n' "$mirror" >"$rootfs/etc/apt/sources.list"
tar --numeric-owner -C "$rootfs" -cf "$out.part" .
mv "$out.part" "$out"
rm -rf "$rootfs"

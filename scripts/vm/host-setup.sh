#!/usr/bin/env bash
# Host tools `make vm-test` needs (root; idempotent): QEMU (TCG/KVM), debootstrap, cpio, zstd, and any
# further Debian packages named as arguments (scripts/vagrant/cluster-test.sh: Vagrant and libvirt).
# A tool that cannot be installed fails loudly: the VM tests do not turn into skips.
set -euo pipefail
pkgs="qemu-system-x86 debootstrap cpio zstd $*"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "vm-test: installing:$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends $missing >/dev/null || {
    apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends $missing >/dev/null; } \
    || { echo "vm-test: FAILED: apt-get install$missing" >&2; exit 1; }
fi
for b in qemu-system-x86_64 debootstrap cpio zstd; do
  command -v $b >/dev/null || { echo "vm-test: FAILED: $b not on PATH after install" >&2; exit 1; }
done

#!/usr/bin/env bash
# Build the test VM image from Debian's packages only (called by testbed/emu/vmimage.py; root).
#
#   build-image.sh CHECKOUT OUT PACKAGES...
#
# debootstrap --variant=minbase bookworm, then `apt-get install` in the chroot, then the project's own
# scripts/setup.sh in the chroot with TESTBED_SETUP_IMAGE=1 (every step that needs no running kernel:
# apt packages, BMv2 + p4c, the venv) so the guest needs no network. Debian's stock kernel package is
# unpacked with dpkg-deb -x (no initramfs-tools), its whole module tree copied and depmod'ed (pruning
# drops dependencies such as crc32c), and the root is packed as an uncompressed newc cpio that the
# kernel unpacks as its root (rdinit=/init). Writes OUT/vmlinuz, OUT/initrd.cpio, OUT/manifest.txt.
set -euo pipefail
src=$(cd "$1" && pwd); out=$2; shift 2
pkgs="$*"
mirror=${TESTBED_VM_MIRROR:-http://deb.debian.org/debian}
p4tools=${P4TOOLS:-/work/shared/p4tools}
say() { printf 'vm-image: %s\n' "$*"; }
root="$out/root"
mkdir -p "$out"
mounted() { awk -v r="$root" 'index($2, r "/") == 1 || $2 == r' /proc/mounts | grep -q .; }
cleanup() {
  for m in shared/p4tools dev/pts dev proc sys; do
    mountpoint -q "$root/$m" 2>/dev/null && umount -l "$root/$m" || true
  done
  # Never delete through a bind mount (the checkout, /dev): only once nothing is mounted below the root.
  if mounted; then say "WARNING: mounts remain under $root; not removing it"; else rm -rf --one-file-system "$root"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "debootstrap --variant=minbase bookworm ($mirror)"
debootstrap --variant=minbase --include=ca-certificates bookworm "$root" "$mirror" >"$out/debootstrap.log" 2>&1 \
  || { tail -5 "$out/debootstrap.log" >&2; say "debootstrap failed; see $out/debootstrap.log"; exit 1; }
cat > "$root/etc/apt/sources.list" <<SRC
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
SRC
printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"; chmod +x "$root/usr/sbin/policy-rc.d"
cp /etc/resolv.conf "$root/etc/resolv.conf"
mount -t proc proc "$root/proc"; mount --bind /sys "$root/sys"; mount --bind /dev "$root/dev"
mount --bind /dev/pts "$root/dev/pts"
in_root() { chroot "$root" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/root DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 "$@"; }

say "apt-get install (in the chroot):$(echo " $pkgs" | tr -s ' \n' ' ')"
echo "wireshark-common wireshark-common/install-setuid boolean false" | in_root debconf-set-selections
in_root apt-get update -q >"$out/apt.log" 2>&1
in_root apt-get install -y -q --no-install-recommends $pkgs >>"$out/apt.log" 2>&1 \
  || { tail -5 "$out/apt.log" >&2; say "apt-get install failed; see $out/apt.log"; exit 1; }

kpkg=$(in_root apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-6/ {print $2; exit}')
[ -n "$kpkg" ] || { say "cannot resolve linux-image-amd64 to a kernel package"; exit 1; }
say "kernel: $kpkg (dpkg-deb -x, whole module tree, depmod)"
in_root sh -c "cd /tmp && apt-get download -q $kpkg" >>"$out/apt.log" 2>&1
mkdir -p "$out/kernel"; dpkg-deb -x "$root"/tmp/"${kpkg}"_*.deb "$out/kernel"; rm -f "$root"/tmp/*.deb
kver=$(ls "$out/kernel/lib/modules")
cp "$out/kernel/boot/vmlinuz-$kver" "$out/vmlinuz"
mkdir -p "$root/lib/modules"; cp -a "$out/kernel/lib/modules/$kver" "$root/lib/modules/"
rm -rf "$out/kernel"
# zstd-compress the modules (kmod loads .ko.zst): the root lives in guest RAM, 400 MB of modules -> ~100 MB.
find "$root/lib/modules/$kver" -name '*.ko' -print0 | xargs -0 -r -P2 -n200 zstd -q --rm -9
depmod -b "$root" "$kver"

say "project setup in the chroot (scripts/setup.sh, TESTBED_SETUP_IMAGE=1)"
# A copy of the checkout (the venv's editable install points at /testbed, where the guest mounts the
# live checkout over it with 9p); the BMv2 build read-only; the host's CA bundle for pip (a TLS proxy
# may sit between this machine and PyPI), removed again below.
mkdir -p "$root/testbed" "$root/shared/p4tools"
tar -C "$src" --exclude=./.git --exclude=./.venv --exclude=./results --exclude=./build -cf - . | tar -C "$root/testbed" -xf -
if [ -d "$p4tools" ]; then mount --bind "$p4tools" "$root/shared/p4tools"; mount -o remount,bind,ro "$root/shared/p4tools"; fi
cp /etc/ssl/certs/ca-certificates.crt "$root/tmp/host-ca.crt"
in_root env TESTBED_SETUP_IMAGE=1 VENV=/opt/testbed-venv P4TOOLS=/shared/p4tools \
  PIP_CERT=/tmp/host-ca.crt PIP_DEFAULT_TIMEOUT=180 bash /testbed/scripts/setup.sh >"$out/setup.log" 2>&1 \
  || { tail -5 "$out/setup.log" >&2; say "scripts/setup.sh failed in the image; see $out/setup.log"; exit 1; }
mountpoint -q "$root/shared/p4tools" && umount "$root/shared/p4tools"
rmdir "$root/shared/p4tools" "$root/shared"
find "$root/testbed" -mindepth 1 -delete
rm -f "$root/tmp/host-ca.crt"

# BMv2's loopback shim, compiled here (the guest has no C compiler) into the guest's P4 cache.
shim_key=$(sha256sum "$src/testbed/data/bind_loopback.c" | cut -c1-16)
mkdir -p "$root/var/cache/scaleout-testbed/p4"
cc -shared -fPIC -O2 -o "$root/var/cache/scaleout-testbed/p4/bind-loopback-$shim_key.so" \
  "$src/testbed/data/bind_loopback.c" -ldl

install -m 0755 "$src/scripts/vm/guest-init.sh" "$root/init"
in_root apt-get clean
find "$root/opt/testbed-venv/lib" -depth -type d -name tests -path '*site-packages/*/tests' -exec rm -rf {} +
rm -rf "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/locale/* \
  "$root"/root/.cache "$root/etc/resolv.conf" "$root/usr/sbin/policy-rc.d"
echo "scaleout-vm" > "$root/etc/hostname"
for m in dev/pts dev proc sys; do umount -l "$root/$m"; done

say "packing the root as the initramfs"
(cd "$root" && find . -xdev | LC_ALL=C sort | cpio -o -H newc --quiet) > "$out/initrd.cpio"
{ echo "kernel $kver"; echo "kernel_package $kpkg"; echo "initrd_bytes $(stat -c %s "$out/initrd.cpio")"
  echo "built $(date -u +%FT%TZ)"; } > "$out/manifest.txt"
say "done: $(cat "$out/manifest.txt" | tr '\n' ' ')"

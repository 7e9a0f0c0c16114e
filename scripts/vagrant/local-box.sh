#!/usr/bin/env bash
# Build a local stand-in for the `debian/bookworm64` libvirt box from Debian's packages only (root).
#
#   local-box.sh IMAGE_DIR OUT        # IMAGE_DIR: the `make vm-test` image (testbed.emu.vmimage)
#
# Why: Vagrant Cloud is out of reach from the project's machine (only package registries are), so the
# Vagrantfiles' pinned box cannot be downloaded. This box starts from the VM harness's image (debootstrap
# minbase bookworm + recipe.PACKAGES + BMv2, scripts/vm/build-image.sh) and turns it into what Vagrant
# expects of a Debian box: systemd as init, Debian's kernel and an initramfs-tools initrd (root=/dev/vda,
# booted directly by libvirt: no boot loader, no loop mounts), DHCP on eth0 with ifupdown (which Vagrant's
# Debian guest capability uses for private networks), sshd with fresh host keys per VM (made on first
# boot), user `vagrant` with Vagrant's insecure public key and passwordless sudo, rsync. The guests get no
# NAT (the host's firewall is left alone), so everything the Vagrantfile's provisioner needs is already
# in the box: the packages scripts/setup.sh installs, /testbed/.venv and /testbed/.venv-ryu (both kept by
# the synced folder's rsync excludes) and apt's package lists, so `apt-get install` of what is installed
# succeeds offline.
#
# Writes OUT/box/{box.img,metadata.json,Vagrantfile,vmlinuz,initrd.img}, OUT/local.box (tar of that),
# OUT/catalog.json (for `vagrant box add OUT/catalog.json`: the pinned name and version), OUT/*.log.
set -euo pipefail
img=$(cd "$1" && pwd); out=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
name=${BOX_NAME:-debian/bookworm64}; version=${BOX_VERSION:-12.20250126.1}
p4tools=${P4TOOLS:-/work/shared/p4tools}
say() { printf 'local-box: %s\n' "$*"; }
mkdir -p "$out"; out=$(cd "$out" && pwd)
root="$out/root"; box="$out/box"
mounted() { awk -v r="$root" 'index($2, r "/") == 1 || $2 == r' /proc/mounts | grep -q .; }
cleanup() {
  for m in shared/p4tools dev/pts dev proc sys; do
    mountpoint -q "$root/$m" 2>/dev/null && umount -l "$root/$m" || true
  done
  if mounted; then say "WARNING: mounts remain under $root; not removing it"; else rm -rf --one-file-system "$root"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
t0=$(date +%s)
[ -f "$img/initrd.cpio" ] || { say "no $img/initrd.cpio (build it: make vm-test, or testbed.emu.vmimage)"; exit 1; }
cleanup; rm -rf "$box"; mkdir -p "$root" "$box"

say "unpacking the VM harness image $(basename "$img")"
(cd "$root" && cpio -idm --quiet < "$img/initrd.cpio")
rm -f "$root/init"; rm -rf "$root"/lib/modules/*          # the harness's PID 1 and its zstd'ed module tree
cp /etc/resolv.conf "$root/etc/resolv.conf"
printf '#!/bin/sh\nexit 101\n' > "$root/usr/sbin/policy-rc.d"; chmod +x "$root/usr/sbin/policy-rc.d"
mount -t proc proc "$root/proc"; mount --bind /sys "$root/sys"; mount --bind /dev "$root/dev"
mount --bind /dev/pts "$root/dev/pts"
in_root() { chroot "$root" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/root DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 "$@"; }

pkgs="systemd systemd-sysv udev dbus sudo rsync ifupdown isc-dhcp-client openssh-server netbase
      initramfs-tools linux-image-amd64 make"
say "apt-get install (in the chroot): $(echo $pkgs)"
in_root apt-get update -q >"$out/apt.log" 2>&1
in_root apt-get install -y -q --no-install-recommends $pkgs >>"$out/apt.log" 2>&1 \
  || { tail -5 "$out/apt.log" >&2; say "apt-get install failed; see $out/apt.log"; exit 1; }
kver=$(ls "$root/lib/modules" | sort -V | tail -1)
[ -f "$root/boot/initrd.img-$kver" ] || in_root update-initramfs -c -k "$kver" >>"$out/apt.log" 2>&1
cp "$root/boot/vmlinuz-$kver" "$box/vmlinuz"; cp "$root/boot/initrd.img-$kver" "$box/initrd.img"
chmod 644 "$box/vmlinuz" "$box/initrd.img"

say "project setup in the chroot: /testbed/.venv (scripts/setup.sh) and /testbed/.venv-ryu (scripts/ryu-env.sh)"
# The guest's `make setup` finds both (and BMv2) and installs nothing; the rsync excludes keep them.
mkdir -p "$root/testbed" "$root/shared/p4tools"
tar -C "$src" --exclude=./.git --exclude=./.venv --exclude=./.venv-ryu --exclude=./results --exclude=./build \
  --exclude=./vagrant/cluster/.keys --exclude=./vagrant/.vagrant --exclude=./vagrant/cluster/.vagrant -cf - . \
  | tar -C "$root/testbed" -xf -
if [ -d "$p4tools" ]; then mount --bind "$p4tools" "$root/shared/p4tools"; mount -o remount,bind,ro "$root/shared/p4tools"; fi
cp /etc/ssl/certs/ca-certificates.crt "$root/tmp/host-ca.crt"
in_root env TESTBED_SETUP_IMAGE=1 P4TOOLS=/shared/p4tools PIP_CERT=/tmp/host-ca.crt PIP_DEFAULT_TIMEOUT=180 \
  bash -c 'cd /testbed && bash scripts/setup.sh && sh scripts/ryu-env.sh' >"$out/setup.log" 2>&1 \
  || { tail -5 "$out/setup.log" >&2; say "setup failed in the chroot; see $out/setup.log"; exit 1; }
mountpoint -q "$root/shared/p4tools" && umount "$root/shared/p4tools"
rmdir "$root/shared/p4tools" "$root/shared"
# Keep the two environments, drop the copy of the checkout (vagrant rsyncs the live one over it).
find "$root/testbed" -mindepth 1 -maxdepth 1 ! -name .venv ! -name .venv-ryu -exec rm -rf {} +
rm -f "$root/tmp/host-ca.crt"

say "vagrant user, sshd, network, fstab"
in_root useradd -m -s /bin/bash -G sudo vagrant
echo 'vagrant ALL=(ALL) NOPASSWD:ALL' > "$root/etc/sudoers.d/vagrant"; chmod 440 "$root/etc/sudoers.d/vagrant"
pub=$(ls /usr/share/rubygems-integration/all/gems/vagrant-*/keys/vagrant.pub 2>/dev/null | head -1)
[ -n "$pub" ] || pub=$(ls /opt/vagrant/embedded/gems/gems/vagrant-*/keys/vagrant.pub 2>/dev/null | head -1)
[ -n "$pub" ] || { say "cannot find Vagrant's insecure public key (keys/vagrant.pub); is vagrant installed?"; exit 1; }
install -d -m 700 "$root/home/vagrant/.ssh"; install -m 600 "$pub" "$root/home/vagrant/.ssh/authorized_keys"
in_root chown -R vagrant:vagrant /home/vagrant/.ssh
rm -f "$root"/etc/ssh/ssh_host_*            # every VM makes its own on first boot
cat > "$root/etc/systemd/system/ssh-hostkeys.service" <<'UNIT'
[Unit]
Description=Generate this VM's SSH host keys (local Vagrant box)
Before=ssh.service
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key
[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A
[Install]
RequiredBy=ssh.service
UNIT
in_root systemctl enable ssh-hostkeys.service ssh.service >/dev/null 2>&1
in_root systemctl enable networking.service >/dev/null 2>&1 || true
cat > "$root/etc/network/interfaces" <<'NET'
source /etc/network/interfaces.d/*
auto lo
iface lo inet loopback
allow-hotplug eth0
iface eth0 inet dhcp
NET
echo '/dev/vda / ext4 errors=remount-ro 0 1' > "$root/etc/fstab"
printf '127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n' > "$root/etc/hosts"
echo bookworm > "$root/etc/hostname"
: > "$root/etc/machine-id"; rm -f "$root/var/lib/dbus/machine-id"
in_root apt-get clean
rm -rf "$root"/root/.cache "$root/etc/resolv.conf" "$root/usr/sbin/policy-rc.d"
for m in dev/pts dev proc sys; do umount -l "$root/$m"; done

say "root file system -> ext4 (mkfs.ext4 -d) -> qcow2"
used=$(du -sxm "$root" | cut -f1); size=$(( (used * 14 / 10 + 2048) / 1024 + 1 ))   # GiB, room to work in
mkfs.ext4 -q -F -L root -d "$root" "$out/root.raw" "${size}G"
qemu-img convert -O qcow2 "$out/root.raw" "$box/box.img"; rm -f "$out/root.raw"
printf '{"provider":"libvirt","format":"qcow2","virtual_size":%d}\n' "$size" > "$box/metadata.json"
# Merged into the user's Vagrantfile: TCG (no KVM needed), direct kernel boot from this box's folder.
cat > "$box/Vagrantfile" <<'VF'
# Local stand-in for debian/bookworm64 (scripts/vagrant/local-box.sh): QEMU TCG, direct kernel boot.
Vagrant.configure("2") do |config|
  config.vm.provider :libvirt do |lv|
    lv.driver = ENV.fetch("VAGRANT_LIBVIRT_DRIVER", "qemu")
    lv.cpu_mode = "custom"
    lv.cpu_model = "Nehalem"
    lv.kernel = File.join(__dir__, "vmlinuz")
    lv.initrd = File.join(__dir__, "initrd.img")
    lv.cmd_line = "root=/dev/vda rw console=ttyS0 net.ifnames=0 biosdevname=0"
    lv.graphics_type = "none"      # serial console only: no VNC (which would listen on 127.0.0.1)
  end
end
VF
tar -C "$box" -cf "$out/local.box" metadata.json Vagrantfile box.img vmlinuz initrd.img
sum=$(sha256sum "$out/local.box" | cut -d' ' -f1)
cat > "$out/catalog.json" <<CAT
{"name": "$name", "versions": [{"version": "$version", "providers": [{"name": "libvirt",
  "url": "file://$out/local.box", "checksum_type": "sha256", "checksum": "$sum"}]}]}
CAT
{ echo "kernel $kver"; echo "box_bytes $(stat -c %s "$out/local.box")"; echo "disk_gib $size"
  echo "from_image $(basename "$img")"; echo "build_s $(( $(date +%s) - t0 ))"; echo "built $(date -u +%FT%TZ)"; } > "$out/manifest.txt"
say "done: $(tr '\n' ' ' < "$out/manifest.txt")"

#!/usr/bin/env bash
# `sudo make vagrant-cluster-test`: vagrant/cluster/Vagrantfile brought up for real on this machine, the
# partitioned scenario run in it, everything torn down on every way out (root; docs/cluster.md).
#
#   1. Debian's vagrant, vagrant-libvirt, libvirt (apt; nothing from Vagrant Cloud or rubygems);
#   2. the local box (scripts/vagrant/local-box.sh, from `make vm-test`'s image), added under the
#      Vagrantfile's pinned name and version, so the Vagrantfile runs unchanged;
#   3. libvirtd + virtlogd started here when none runs (this machine has no init system to do it), the
#      storage pool `default` and two networks in libvirt's `open` forward mode: the management network
#      (DHCP for Vagrant's SSH) and 10.99.0.0/24 (the Vagrantfile's private network). `open` adds no
#      firewall rules and the host does not forward, so the guests reach nothing but each other and the
#      host's two bridges (no NAT: the box needs no network, see local-box.sh);
#   4. `vagrant up` (both VMs, provisioned by the Vagrantfile), then in w0 `testbed cluster run
#      fat-tree-k4` over both VMs (RUN_ARGS, default the TCG settings of tests/vm/test_cluster_vm.py);
#      its results.json is copied to OUT and checked: 8 cut links, every ping pair answered, iperf3
#      across the cut and the failover across the cut passed;
#   5. `vagrant destroy -f`, the box's volume, the networks and pool removed, libvirt stopped if started
#      here (trap: also on failure and Ctrl-C).
#
# Environment: OUT (default results/vagrant-cluster/<stamp>), RUN_ARGS, VAGRANT_LIBVIRT_DRIVER (kvm where
# KVM works; default qemu = TCG), KEEP_UP=1 (leave the VMs and libvirt running; tear down by hand).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PY:-$repo/.venv/bin/python}
case $PY in /*) ;; *) PY=$PWD/$PY ;; esac     # used after the cd below
boxdir=${TESTBED_VAGRANT_BOX_DIR:-/var/cache/scaleout-testbed/vagrant}
state=/var/lib/scaleout-testbed/vagrant
export VAGRANT_HOME=$state/home LIBVIRT_DEFAULT_URI=qemu:///system VAGRANT_DEFAULT_PROVIDER=libvirt
export VAGRANT_CHECKPOINT_DISABLE=1 VAGRANT_NO_PLUGINS_UPDATE=1
RUN_ARGS=${RUN_ARGS:---scale 50000 --links rates --iperf-seconds 10}
out=${OUT:-$repo/results/vagrant-cluster/$(date -u +%Y%m%d-%H%M%S)}
cluster=$repo/vagrant/cluster
say() { printf '%s vagrant-cluster: %s\n' "$(date -u +%T)" "$*"; }
die() { say "FAILED: $*" >&2; exit 1; }
stamp() { while IFS= read -r l; do printf '%(%T)T %s\n' -1 "${l##*$'\r'}"; done; }   # progress bars: last frame
[ "$(id -u)" -eq 0 ] || { echo "vagrant-cluster-test: run as root (sudo make vagrant-cluster-test)" >&2; exit 2; }
mkdir -p "$out" "$state"; chmod 755 "$state" "$(dirname "$state")"
exec > >(tee -a "$out/run.log") 2>&1
t_start=$(date +%s)

# --- 1. host packages ------------------------------------------------------------------------------
bash "$repo/scripts/vm/host-setup.sh" vagrant vagrant-libvirt libvirt-daemon-system libvirt-daemon-system-sysv \
  libvirt-daemon-driver-qemu libvirt-clients dnsmasq-base qemu-utils rsync e2fsprogs \
  || die "host packages (scripts/vm/host-setup.sh)"

# --- 2. the box ------------------------------------------------------------------------------------
image=$("$PY" -c 'from testbed.emu.vmimage import ensure_image; print(ensure_image(say=lambda *a: None)[0].dir)')
want="$(basename "$image") $(sha256sum "$repo/scripts/vagrant/local-box.sh" | cut -c1-16)"
if [ "$(cat "$boxdir/recipe" 2>/dev/null)" != "$want" ] || [ ! -f "$boxdir/catalog.json" ]; then
  say "building the local box from $image (a few minutes)"
  rm -f "$boxdir/recipe"
  nice -n 10 bash "$repo/scripts/vagrant/local-box.sh" "$image" "$boxdir" || die "local-box.sh (logs in $boxdir)"
  echo "$want" > "$boxdir/recipe"
fi
say "box: $(tr '\n' ' ' < "$boxdir/manifest.txt")"

# --- 3. libvirt ------------------------------------------------------------------------------------
started=""; nets=""; pool=""
teardown() {
  rc=$?
  trap - EXIT INT TERM
  set +e      # every step is tried (vagrant-libvirt may already have removed a network, say)
  if [ -n "${KEEP_UP:-}" ]; then say "KEEP_UP: VMs and libvirt left running"; exit $rc; fi
  say "teardown"
  (cd "$cluster" && timeout 600 vagrant destroy -f 2>&1 | stamp) || say "WARNING: vagrant destroy failed"
  for v in $(virsh -q vol-list default 2>/dev/null | awk '/_vagrant_box_image_/ {print $1}'); do
    virsh -q vol-delete --pool default "$v" >/dev/null || true
  done
  for n in $nets; do virsh -q net-destroy "$n" >/dev/null 2>&1; virsh -q net-undefine "$n" >/dev/null 2>&1; done
  if [ -n "$pool" ]; then virsh -q pool-destroy "$pool" >/dev/null 2>&1; virsh -q pool-undefine "$pool" >/dev/null 2>&1; fi
  for d in $started; do
    pid=$(cat "/run/$d.pid" 2>/dev/null || true)
    if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; timeout 30 tail --pid="$pid" -f /dev/null || true; fi
  done
  rm -f "$state/kvm-node"
  left=$(pgrep -a -f "qemu-system-x86_64 -name guest=cluster_w" || true)
  [ -z "$left" ] || say "WARNING: QEMU left running: $left"
  say "exit $rc after $(( $(date +%s) - t_start )) s; log and results in $out"
  exit $rc
}
trap teardown EXIT
trap 'exit 130' INT TERM
# libvirt caches QEMU's capabilities but drops the cache on every lookup when QEMU's probe finds KVM while
# libvirt's qemu user cannot open /dev/kvm (root:root 0600 on this machine): each libvirt call then probes
# QEMU again, 4-7 s a lookup, minutes per `vagrant up`. In libvirtd's own mount namespace /dev/kvm is the
# same device with Debian's usual owner and mode (root:kvm 0660); the host's node is left as it is, and
# the domains are TCG all the same (the box sets driver "qemu").
start_libvirtd() {
  local node=$state/kvm-node
  if [ -c /dev/kvm ] && [ "$(stat -c %G:%a /dev/kvm)" = root:600 ] && getent group kvm >/dev/null; then
    rm -f "$node"
    mknod -m 660 "$node" c $((0x$(stat -c %t /dev/kvm))) $((0x$(stat -c %T /dev/kvm))) && chgrp kvm "$node"
    unshare -m --propagation private sh -c "mount --bind '$node' /dev/kvm && exec /usr/sbin/libvirtd -d"
  else
    /usr/sbin/libvirtd -d
  fi
}
for d in virtlogd libvirtd; do
  if ! pgrep -x "$d" >/dev/null; then
    if [ "$d" = libvirtd ]; then start_libvirtd; else /usr/sbin/virtlogd -d; fi
    started="$d $started"     # stopped in reverse order
  fi
done
for _ in $(seq 100); do virsh -q version >/dev/null 2>&1 && break; sleep 0.2; done
virsh -q version >/dev/null 2>&1 || die "libvirtd did not answer on qemu:///system"
if ! virsh -q pool-info default >/dev/null 2>&1; then
  mkdir -p /var/lib/libvirt/images
  virsh -q pool-define-as default dir --target /var/lib/libvirt/images >/dev/null && pool=default
  virsh -q pool-start default >/dev/null
fi
define_net() {  # name bridge address [dhcp-range]: libvirt's `open` mode, no DNS
  local dhcp=""
  virsh -q net-info "$1" >/dev/null 2>&1 && die "libvirt network $1 exists already (not made here; remove it)"
  [ -z "${4:-}" ] || dhcp="<dhcp><range start='${4% *}' end='${4#* }'/></dhcp>"
  virsh -q net-define <(printf "<network><name>%s</name><forward mode='open'/><bridge name='%s' stp='off'/>
    <dns enable='no'/><ip address='%s' netmask='255.255.255.0'>%s</ip></network>" "$1" "$2" "$3" "$dhcp") >/dev/null
  nets="$nets $1"
  virsh -q net-start "$1" >/dev/null
}
define_net vagrant-libvirt vbr-tbmgmt 192.168.121.1 "192.168.121.10 192.168.121.250"
define_net scaleout-cluster vbr-tbclu 10.99.0.1
say "libvirt: ${started:-already running}; networks:$nets (open, no NAT); pool: ${pool:-existing}"

# --- 4. vagrant up, the scenario ---------------------------------------------------------------------
say "vagrant box add (local stand-in for the pinned box)"
vagrant box add --force --provider libvirt "$boxdir/catalog.json" 2>&1 | stamp | tail -2
cd "$cluster"
t0=$(date +%s)
say "vagrant up --provider=libvirt"
vagrant up --provider=libvirt 2>&1 | stamp | tee "$out/up.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || die "vagrant up (log $out/up.log)"
t_up=$(( $(date +%s) - t0 ))
say "vagrant up done in $t_up s"
stamp=$(date -u +%Y%m%d-%H%M%S)
run="cd /testbed && sudo .venv/bin/testbed cluster run fat-tree-k4 --workers root@10.99.0.11,root@10.99.0.12 \
--identity /root/.ssh/cluster_key $RUN_ARGS --out results/cluster/vagrant-$stamp"
say "w0: $run"
t0=$(date +%s)
set +e
vagrant ssh w0 -c "$run" 2>&1 | stamp | tee "$out/scenario.log"
rc_run=${PIPESTATUS[0]}
set -e
t_run=$(( $(date +%s) - t0 ))
vagrant ssh w0 -c "sudo cat /testbed/results/cluster/vagrant-$stamp/results.json" > "$out/results.json" 2>/dev/null || true
say "scenario exit $rc_run in $t_run s"
"$PY" - "$out/results.json" "$rc_run" "$t_up" "$t_run" <<'PYEOF'
import json, sys
path, rc, t_up, t_run = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
try:
    doc = json.loads(open(path).read())
except (OSError, ValueError) as exc:
    sys.exit(f"vagrant-cluster: FAILED: no results.json from w0 ({exc})")
ping, ip, fo = doc.get("pingall", {}), doc.get("iperf_cut", {}), doc.get("failover_cut", {})
summary = {"up_s": t_up, "scenario_s": t_run, "scenario_exit": rc, "cut": doc.get("partition", {}).get("cut"),
           "timings": doc.get("timings"), "ping_pairs": ping.get("pairs"), "ping_lost": len(ping.get("lost", [])),
           "iperf_ratio": ip.get("ratio"), "iperf_passed": ip.get("passed"),
           "failover": {k: fo.get(k) for k in ("failed", "reroute_s", "ping_loss_pct", "passed")}}
print(json.dumps(summary, indent=1))
json.dump(summary, open(path.replace("results.json", "summary.json"), "w"), indent=1)
bad = [what for what, ok in (("exit status", rc == 0), ("8 cut links", summary["cut"] == 8),
                             ("every ping pair", ping.get("pairs") == 240 and not ping.get("lost")),
                             ("iperf3 across the cut", ip.get("passed")), ("failover across the cut", fo.get("passed")))
       if not ok]
sys.exit(f"vagrant-cluster: FAILED: {', '.join(bad)}" if bad else 0)
PYEOF
say "PASSED"

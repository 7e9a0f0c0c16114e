#!/bin/bash
# PID 1 of the test VM (packed as /init of the initramfs root; see docs/vm.md).
#
# Mounts the kernel file systems and the host's 9p shares, then runs a tiny job agent: the host drops
# JOB.sh into the `ctl` share's jobs/ folder; the agent runs it (bash, own session, cwd /testbed) and
# writes JOB.out (stdout+stderr) and JOB.rc (exit status) next to it. Nothing else listens and the guest
# has no network besides the links the host gave it. Shares (tags): src -> /testbed (the checkout,
# read-only), ctl -> /mnt/ctl (the job spool), out -> /mnt/out (results copied back), share -> /mnt/share
# (one folder every VM of a group sees).
export PATH=/opt/testbed-venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8 VENV=/opt/testbed-venv PYTHONDONTWRITEBYTECODE=1 TESTBED_IN_VM=1
export TESTBED_P4_CACHE=/var/cache/scaleout-testbed/p4 TESTBED_LOCK_WAIT=1800
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm /sys/fs/cgroup
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
mkdir -p /run/lock /var/run
echo 1 > /proc/sys/kernel/sysrq
for m in virtio_pci virtio_net 9pnet_virtio 9p tun; do modprobe "$m"; done
name=$(sed -n 's/.*testbed\.name=\([^ ]*\).*/\1/p' /proc/cmdline)
hostname "${name:-scaleout-vm}"
ip link set lo up
opts=trans=virtio,version=9p2000.L,msize=524288
mkdir -p /testbed /mnt/ctl /mnt/out /mnt/share
mount -t 9p -o "$opts" ctl /mnt/ctl || { echo "init: cannot mount the ctl share"; echo o > /proc/sysrq-trigger; }
mount -t 9p -o "$opts,ro" src /testbed 2>/dev/null
mount -t 9p -o "$opts" out /mnt/out 2>/dev/null
mount -t 9p -o "$opts" share /mnt/share 2>/dev/null
cd /testbed 2>/dev/null || cd /
uname -r > /mnt/ctl/ready.tmp && mv /mnt/ctl/ready.tmp /mnt/ctl/ready
echo "init: $(hostname) ready ($(uname -r))"
jobs_dir=/mnt/ctl/jobs
while :; do
  for job in "$jobs_dir"/*.sh; do
    [ -e "$job" ] || continue
    base=${job%.sh}
    [ -e "$base.started" ] && continue
    : > "$base.started"
    ( setsid bash "$job" > "$base.out" 2>&1 < /dev/null; echo $? > "$base.rc.tmp"; mv "$base.rc.tmp" "$base.rc" ) &
  done
  sleep 0.3
done

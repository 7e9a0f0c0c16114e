#!/usr/bin/env bash
# One-command, idempotent setup of a fresh machine (as root): apt packages, Open vSwitch running,
# BMv2 + p4c, and the project's virtual environment in .venv. Called by `make setup`, by the Vagrantfile
# and, inside the test VM, by `make vm-test` (docs/vm.md).
#
# A tool this script is responsible for that ends up missing fails it loudly (exit 1), so CI cannot go
# green with the P4/OVS tests skipped. The only exception is BMv2 on a system with no install path
# (not Debian 12 with ../shared/p4tools, not Ubuntu): set TESTBED_WITHOUT_P4=1 to accept that.
#
# Environment:
#   VENV=DIR               the virtual environment (default .venv)
#   P4TOOLS=DIR            the BMv2/p4c build to install on Debian 12 (default ../shared/p4tools)
#   TESTBED_SETUP_IMAGE=1  building a VM image in a chroot: do every step that needs no running kernel
#                          (packages, BMv2, venv) and do not start Open vSwitch
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: FAILED: %s\n' "$*" >&2; exit 1; }
VENV=${VENV:-.venv}
P4TOOLS=${P4TOOLS:-../shared/p4tools}
image=${TESTBED_SETUP_IMAGE:-}
[ "$(id -u)" -eq 0 ] || { echo "setup: run as root (sudo make setup)" >&2; exit 2; }

# --- apt packages -------------------------------------------------------------------------------
pkgs="mininet openvswitch-switch iproute2 iputils-ping iperf3 tcpdump tshark ethtool python3-venv
      python3-pip procps psmisc"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  say "installing:$missing"
  export DEBIAN_FRONTEND=noninteractive
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
  apt-get update -q >/dev/null || die "apt-get update failed"
  apt-get install -y -q $missing >/dev/null || die "apt-get install$missing failed"
fi

# --- Open vSwitch: running with or without the kernel datapath ---------------------------------
command -v ovs-vsctl >/dev/null || die "openvswitch-switch is installed but ovs-vsctl is not on PATH"
if [ -n "$image" ]; then
  say "image build: Open vSwitch is started when the VM boots"
else
  if ! ovs-vsctl --timeout=5 show >/dev/null 2>&1; then
    say "starting Open vSwitch"
    ovslog=$(mktemp)
    /usr/share/openvswitch/scripts/ovs-ctl start --system-id=random >"$ovslog" 2>&1 || \
      /usr/share/openvswitch/scripts/ovs-ctl start >>"$ovslog" 2>&1 || true
  fi
  if ! ovs-vsctl --timeout=5 show >/dev/null 2>&1; then
    cat "${ovslog:-/dev/null}" >&2
    die "Open vSwitch did not start (ovs-ctl start); the OVS replicas and their tests need it"
  fi
  rm -f "${ovslog:-}"
  say "Open vSwitch $(ovs-vsctl --version | head -1 | awk '{print $NF}') is running"
fi

# --- BMv2 + p4c ----------------------------------------------------------------------------------
. /etc/os-release
if command -v simple_switch >/dev/null && command -v p4c-bm2-ss >/dev/null && command -v simple_switch_CLI >/dev/null; then
  say "BMv2 and p4c already on PATH"
elif [ "${ID:-}" = debian ] && [ "${VERSION_ID:-}" = 12 ] && [ -f "$P4TOOLS/install.sh" ]; then
  bash "$P4TOOLS/install.sh" || die "BMv2/p4c install from $P4TOOLS failed"
elif [ "${ID:-}" = ubuntu ]; then
  say "installing p4lang-bmv2 and p4lang-p4c from p4lang's packages"
  bash scripts/setup-p4-ubuntu.sh || die "could not install BMv2/p4c from p4lang's packages"
elif [ -n "${TESTBED_WITHOUT_P4:-}" ]; then
  say "WARNING: no BMv2/p4c for ${PRETTY_NAME:-this system} (TESTBED_WITHOUT_P4 set); P4 features are unavailable."
else
  die "no BMv2/p4c install path for ${PRETTY_NAME:-this system} (Debian 12 needs $P4TOOLS, or use Ubuntu);
       build them from p4lang's sources, or set TESTBED_WITHOUT_P4=1 to run without P4"
fi
if [ -z "${TESTBED_WITHOUT_P4:-}" ]; then
  for b in simple_switch simple_switch_CLI p4c-bm2-ss; do
    command -v $b >/dev/null || die "BMv2/p4c install finished but $b is not on PATH"
  done
fi

# --- Python environment --------------------------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV (with Debian's system site packages, for Mininet)"
  /usr/bin/python3 -m venv --system-site-packages "$VENV"
fi
stamp=$VENV/.installed-from
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! "$VENV/bin/python" -c "import testbed" 2>/dev/null; then
  say "installing the testbed into $VENV"
  # pip warns about index locations this machine lacks (e.g. /opt/pypi-more); keep real errors visible.
  log=$(mktemp)
  if ! "$VENV/bin/pip" install -q --disable-pip-version-check -e '.[dev]' >"$log" 2>&1; then
    grep -v -e 'pypi-more' -e '^WARNING: Location' "$log" >&2 || true; rm -f "$log"
    say "pip install failed"; exit 1
  fi
  grep -v -e 'pypi-more' -e '^WARNING: Location' -e '^WARNING: Skipping' "$log" || true; rm -f "$log"
  echo "$want" > "$stamp"
fi
"$VENV/bin/python" -c "import testbed, mininet.net, os_ken" || die "$VENV cannot import testbed, mininet and os_ken"
# Real Ryu 4.34 in its own environment, for the host's app-under-Ryu test (pins: scripts/ryu-env.sh,
# docs/sdn.md). A VM image build and a VM guest (its source tree is mounted read-only) leave it out: no guest
# test runs Ryu.
if [ -n "$image" ] || [ ! -w . ]; then
  say ".venv-ryu left out (VM image or read-only source tree; only the host's Ryu test needs it)"
else
  sh scripts/ryu-env.sh || die "cannot build .venv-ryu (Ryu 4.34) with scripts/ryu-env.sh"
fi
say "done: $VENV/bin/testbed doctor tells what this machine can emulate"

#!/usr/bin/env bash
# One-command, idempotent setup of a fresh machine (as root): apt packages, Open vSwitch running,
# BMv2 + p4c, and the project's virtual environment in .venv. Called by `make setup`.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf 'setup: %s\n' "$*"; }
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
  apt-get update -q >/dev/null
  apt-get install -y -q $missing >/dev/null
fi

# --- Open vSwitch: running with or without the kernel datapath ---------------------------------
if ! ovs-vsctl --timeout=5 show >/dev/null 2>&1; then
  say "starting Open vSwitch"
  /usr/share/openvswitch/scripts/ovs-ctl start --system-id=random >/dev/null 2>&1 || \
    /usr/share/openvswitch/scripts/ovs-ctl start >/dev/null 2>&1 || true
fi
ovs-vsctl --timeout=5 show >/dev/null 2>&1 && say "Open vSwitch $(ovs-vsctl --version | head -1 | awk '{print $NF}') is running" \
  || say "WARNING: Open vSwitch did not start; OVS replicas are unavailable (see testbed doctor)"

# --- BMv2 + p4c ----------------------------------------------------------------------------------
. /etc/os-release
if command -v simple_switch >/dev/null && command -v p4c-bm2-ss >/dev/null && command -v simple_switch_CLI >/dev/null; then
  say "BMv2 and p4c already on PATH"
elif [ "${ID:-}" = debian ] && [ "${VERSION_ID:-}" = 12 ] && [ -f ../shared/p4tools/install.sh ]; then
  bash ../shared/p4tools/install.sh
elif [ "${ID:-}" = ubuntu ]; then
  say "installing p4lang-bmv2 and p4lang-p4c from p4lang's packages"
  bash scripts/setup-p4-ubuntu.sh || say "WARNING: could not install BMv2/p4c; P4 features are unavailable (testbed doctor)"
else
  say "WARNING: no BMv2/p4c for ${PRETTY_NAME:-this system}; P4 features are unavailable (testbed doctor)."
  say "         build them from p4lang's behavioral-model and p4c sources to enable them."
fi

# --- Python environment --------------------------------------------------------------------------
if [ ! -x .venv/bin/python ]; then
  say "creating .venv (with Debian's system site packages, for Mininet)"
  /usr/bin/python3 -m venv --system-site-packages .venv
fi
stamp=.venv/.installed-from
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ "$(cat $stamp 2>/dev/null)" != "$want" ] || ! .venv/bin/python -c "import testbed" 2>/dev/null; then
  say "installing the testbed into .venv"
  # pip warns about index locations this machine lacks (e.g. /opt/pypi-more); keep real errors visible.
  log=$(mktemp)
  if ! .venv/bin/pip install -q --disable-pip-version-check -e '.[dev]' >"$log" 2>&1; then
    grep -v -e 'pypi-more' -e '^WARNING: Location' "$log" >&2 || true; rm -f "$log"
    say "pip install failed"; exit 1
  fi
  grep -v -e 'pypi-more' -e '^WARNING: Location' -e '^WARNING: Skipping' "$log" || true; rm -f "$log"
  echo "$want" > $stamp
fi
say "done: .venv/bin/testbed doctor tells what this machine can emulate"

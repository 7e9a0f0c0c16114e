#!/bin/sh
# Build .venv-ryu: real Ryu 4.34 on this Python, to run controllers.fabric under ryu-manager
# (controllers/ryurun.py). Pins measured on Python 3.11 (see controllers/compat.py, docs/sdn.md):
#   setuptools<58       Ryu's setup.py calls easy_install.get_script_args (removed in 58)
#   eventlet==0.33.3    <=0.30.2 fails on 3.11 (immutable TimeoutError); ryurun supplies ALREADY_HANDLED
#   dnspython>=2.3      eventlet 0.33's resolver with an old dnspython fails (collections.MutableMapping)
set -eu
cd "$(dirname "$0")/.."
VENV=${RYU_VENV:-.venv-ryu}
[ -x "$VENV/bin/ryu-manager" ] && "$VENV/bin/python" -c "import ryu, networkx" 2>/dev/null && exit 0
pipq() {  # pip, quiet; its warnings about index locations this machine lacks are dropped, errors kept
  log=$(mktemp)
  if ! "$VENV/bin/pip" install -q --disable-pip-version-check "$@" >"$log" 2>&1; then
    grep -v '^WARNING: Location' "$log" >&2; rm -f "$log"; echo "ryu-env: pip install $* failed" >&2; exit 1
  fi
  rm -f "$log"
}
python3 -m venv "$VENV"
pipq 'setuptools<58' wheel
pipq --no-build-isolation 'ryu==4.34'
pipq 'eventlet==0.33.3' 'dnspython>=2.3' networkx PyYAML
echo "ryu-env: $("$VENV/bin/python" -m controllers.ryurun --version 2>&1 | tail -1) in $VENV"

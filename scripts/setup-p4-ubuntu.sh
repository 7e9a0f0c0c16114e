#!/usr/bin/env bash
# BMv2 + p4c on Ubuntu 22.04/24.04 from p4lang's packages (openSUSE Build Service repository).
set -euo pipefail
. /etc/os-release
case "${VERSION_ID:-}" in 20.04|22.04|24.04) ;; *) echo "no p4lang packages for Ubuntu ${VERSION_ID:-?}" >&2; exit 1;; esac
repo="https://download.opensuse.org/repositories/home:/p4lang/xUbuntu_${VERSION_ID}"
echo "deb ${repo}/ /" > /etc/apt/sources.list.d/p4lang.list
curl -fsSL "${repo}/Release.key" | gpg --dearmor > /etc/apt/trusted.gpg.d/p4lang.gpg
apt-get update -q >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -q p4lang-bmv2 p4lang-p4c >/dev/null

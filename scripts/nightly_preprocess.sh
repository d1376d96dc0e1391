#!/usr/bin/env bash
# Nightly evidence-index refresh, for cron. Incremental: unchanged days are skipped,
# so running it every night (or every hour) only builds what is new or changed.
#
#   crontab:  15 2 * * *  /path/to/aiops-rca/scripts/nightly_preprocess.sh >> /var/log/rca-nightly.log 2>&1
#
# Environment (all optional):
#   RCA_HOME      project checkout (default: the directory above this script)
#   NIGHTLY_DATA_DIR  raw data root with YYYY-MM-DD day directories (default: settings, i.e.
#                     config/config.toml or RCA_PATHS__DATA_DIR)
#   NIGHTLY_INDEX_DIR evidence index directory (default: config / settings)
#   NIGHTLY_WORKERS   processes for metric/trace partitions (default: 1)
set -euo pipefail

RCA_HOME="${RCA_HOME:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
cd "$RCA_HOME"

# One run at a time: a slow night must not overlap the next cron start.
exec 9>"${TMPDIR:-/tmp}/rca-nightly-preprocess.lock"
if ! flock -n 9; then
  echo "$(date -u +%FT%TZ) another nightly preprocess is running; exiting"
  exit 0
fi

args=(preprocess --all --workers "${NIGHTLY_WORKERS:-1}")
[[ -n "${NIGHTLY_DATA_DIR:-}" ]] && args+=(--data-dir "$NIGHTLY_DATA_DIR")
[[ -n "${NIGHTLY_INDEX_DIR:-}" ]] && args+=(--index-dir "$NIGHTLY_INDEX_DIR")

echo "$(date -u +%FT%TZ) nightly preprocess start: ${args[*]}"
status=0
"$RCA_HOME/.venv/bin/rca" "${args[@]}" || status=$?
# 0 complete, 1 a partition failed, 3 finished with data loss (unreadable files named above),
# 4 another run holds the index lock (index/cli.py).
echo "$(date -u +%FT%TZ) nightly preprocess end (exit $status)"
exit "$status"

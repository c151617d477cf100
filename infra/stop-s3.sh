#!/usr/bin/env bash
# Stop the local SeaweedFS S3 gateway started by infra/start-s3.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
exec "$PY" infra/seaweedfs.py stop "$@"

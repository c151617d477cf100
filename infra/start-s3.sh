#!/usr/bin/env bash
# Start the local SeaweedFS S3 gateway (see infra/README.md). Extra args go to infra/seaweedfs.py start.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
exec "$PY" infra/seaweedfs.py start "$@"

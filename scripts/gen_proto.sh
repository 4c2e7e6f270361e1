#!/usr/bin/env bash
# Generates the Python code for proto/ into gen/ (or into $1). Never edit gen/ by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-gen}"
py="${PYTHON:-.venv/bin/python}"
rm -rf "$out/chat"
mkdir -p "$out"
mapfile -t protos < <(cd proto && find chat -name '*.proto' | sort)
(cd proto && "../$py" -m grpc_tools.protoc -I. \
  --python_out="../$out" --pyi_out="../$out" --grpc_python_out="../$out" "${protos[@]}")
# Make every generated folder a regular package so setuptools and mypy find it.
find "$out/chat" -type d -exec touch {}/__init__.py \;

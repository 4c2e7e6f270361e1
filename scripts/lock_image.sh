#!/usr/bin/env bash
# Writes deploy/images/requirements.lock: the services' whole dependency tree (pyproject.toml's
# dependencies, no extras), each pinned with its hashes, for CPython 3.11 on x86-64 Linux (the
# image's). Run it after changing a dependency; tests/deploy/test_image.py checks the lock
# still pins what pyproject.toml asks for.
set -euo pipefail
cd "$(dirname "$0")/.."
uv_version="0.13.9"
tools="${TMPDIR:-/tmp}/chat-lock-tools"
if [ ! -x "$tools/bin/uv" ] || [ "$("$tools/bin/uv" --version | cut -d' ' -f2)" != "$uv_version" ]; then
  "${PYTHON:-python3}" -m venv "$tools"
  "$tools/bin/pip" install --quiet --disable-pip-version-check "uv==$uv_version"
fi
"$tools/bin/uv" pip compile pyproject.toml --generate-hashes --python-version 3.11 \
  --python-platform x86_64-manylinux_2_28 --no-header --annotation-style line \
  -o deploy/images/requirements.lock

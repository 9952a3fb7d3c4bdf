#!/usr/bin/env bash
# Builds the GPU test binaries and gpu_bench here (sm_90, Release) and packs
# them into .gpu/ (ignored by git) for tools/gpu_check.sh on a GPU machine
# that may lack the Debian -dev packages:
#   .gpu/bin       backend_ops_test, ssm_tree_ops_test, cuda_model_test, gpu_bench,
#                  stree_bench, and for tools/gpu_spec_check.sh spec_bench,
#                  treespec-worker, treespec-drafter (stripped)
#   .gpu/lib       every shared library they need that a CUDA image does not
#                  already have (abseil, OpenBLAS, gloo, sentencepiece, ...)
# Left out on purpose, because the GPU machine has them (newer or matching):
# the C/C++ runtime (libc, libm, libstdc++, libgcc_s, ld-linux) and CUDA's own
# libcuda, libcudart, libcublas(Lt), libnccl. Binaries built with Debian 12's
# g++ 12 need GLIBCXX <= 3.4.30 and glibc <= 2.36, which Ubuntu 24.04 exceeds.
#
# Usage: tools/gpu_bundle.sh            (BUILD_DIR=build-gpu by default)
# Then carry `.gpu` to the GPU machine and run: tools/gpu_check.sh .gpu
# (the fixture models and models/demo travel with the working tree). The
# device tool sends at most 64 MiB (working tree + carried paths): keep the
# bundle small: it is also packed into .gpu.txz (xz -9, about 18 MB against
# 120 MB unpacked; the CUDA kernels are in every binary). Carry `.gpu.txz` and
# start the command with `tar xJf .gpu.txz`. Mind the sum: since the hybrid
# demo models landed (2026-11-26) the tracked tree alone is ~62 MiB, so a
# device call needs a slimmer working tree than main's (e.g. a scratch branch
# without models/demo/{hybrid-*,mamba2-target,eagle*,redrafter-head}, checked
# out in the session's own checkout for the call, if the run needs none of
# them); the tool refuses a tree over 64 MiB before starting a machine.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${BUILD_DIR:-build-gpu}"
DEST=.gpu
TARGETS=(backend_ops_test ssm_tree_ops_test cuda_model_test gpu_bench stree_bench spec_bench
         treespec-worker treespec-drafter)
LIMIT_MB=20

cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTREESPEC_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_EXE_LINKER_FLAGS="-Wl,--as-needed" \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache >/dev/null
ninja -C "$BUILD" "${TARGETS[@]}" treespec_spm

rm -rf "$DEST"
mkdir -p "$DEST/bin" "$DEST/lib"
for t in "${TARGETS[@]}"; do
  src=$(find "$BUILD" -type f -name "$t" -perm -u+x | head -1)
  [ -n "$src" ] || { echo "gpu_bundle: $t was not built" >&2; exit 1; }
  cp "$src" "$DEST/bin/$t"
  strip --strip-unneeded "$DEST/bin/$t"
done

system_lib='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libstdc\+\+\.so|libgcc_s\.so|libcuda\.so|libcudart\.so|libcublas\.so|libcublasLt\.so|libnccl\.so)'
for t in "${TARGETS[@]}"; do
  ldd "$DEST/bin/$t" | awk '/=> \// {print $1, $3}' | while read -r name path; do
    if [[ "$name" =~ $system_lib ]]; then continue; fi
    [ -e "$DEST/lib/$name" ] || cp -L "$path" "$DEST/lib/$name"
  done
done
# The SentencePiece plugin (found at <bin>/../lib, core/tokenizer) and what it
# needs: spec_bench tokenizes its prompts.
cp -L "$BUILD/lib/libtreespec_spm.so" "$DEST/lib/"
ldd "$DEST/lib/libtreespec_spm.so" | awk '/=> \// {print $1, $3}' | while read -r name path; do
  if [[ "$name" =~ $system_lib ]]; then continue; fi
  [ -e "$DEST/lib/$name" ] || cp -L "$path" "$DEST/lib/$name"
done
strip --strip-unneeded "$DEST"/lib/*.so* 2>/dev/null || true

{
  echo "built $(date -u +%FT%TZ) from $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet 2>/dev/null || echo '+dirty')"
  echo "nvcc: $(nvcc --version | tail -1)"
  for t in "${TARGETS[@]}"; do
    echo "$t needs $(objdump -T "$DEST/bin/$t" | grep -o 'GLIBCXX_[0-9.]*' | sort -Vu | tail -1)," \
         "$(objdump -T "$DEST/bin/$t" | grep -o 'GLIBC_[0-9.]*' | sort -Vu | tail -1)"
  done
  echo "libraries:"; ls -1 "$DEST/lib"
} > "$DEST/MANIFEST"

tar cf - "$DEST" | xz -T2 -9 > "$DEST.txz"
size_mb=$(du -sm "$DEST" | cut -f1)
packed_mb=$(du -sm "$DEST.txz" | cut -f1)
cat "$DEST/MANIFEST"
echo "gpu_bundle: $DEST is ${size_mb} MB, $DEST.txz ${packed_mb} MB"
if [ "$packed_mb" -gt "$LIMIT_MB" ]; then
  echo "gpu_bundle: warning: $DEST.txz is over ${LIMIT_MB} MB" >&2
fi

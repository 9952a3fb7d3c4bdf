#!/usr/bin/env bash
# Installs the Debian packages treespec builds and tests with; idempotent: only
# missing packages are installed. Run as root or with sudo available.
#   tools/install_deps.sh        the packages of the normal build and tests
#   tools/install_deps.sh fuzz   those plus clang and its libFuzzer runtime (tools/fuzz.sh)
#   tools/install_deps.sh sanitize  those plus clang, its sanitizer runtimes and
#                                   libomp (tools/sanitize.sh builds everything with clang)
set -euo pipefail
PKGS="build-essential cmake ninja-build pkg-config ccache
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
      libgloo-dev libsentencepiece-dev libicu-dev nlohmann-json3-dev
      libcpp-httplib-dev libssl-dev libboost-dev python3-yaml libgtest-dev libgmock-dev libbenchmark-dev"
if [ "${1:-}" = fuzz ] || [ "${1:-}" = sanitize ]; then
  # clang-14 only recommends the sanitizer and libFuzzer runtimes (libclang_rt.*).
  PKGS="$PKGS clang libclang-rt-14-dev"
fi
if [ "${1:-}" = sanitize ]; then
  PKGS="$PKGS libomp-dev"  # clang's OpenMP runtime, for the CPU kernels
fi
missing=""
for p in $PKGS; do
  if ! dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed'; then
    missing="$missing $p"
  fi
done
if [ -z "$missing" ]; then
  exit 0
fi
echo "installing:$missing" >&2
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null

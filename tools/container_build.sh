#!/usr/bin/env bash
# Builds the container image (Containerfile) with buildah and smoke-tests it:
# every binary's --help runs (all shared libraries present), the user is the
# non-root 65532 that k8s/ expects, and the demo image serves: a worker on the
# demo target and a coordinator with its SentencePiece tokenizer start inside
# the image, their health ports accept connections, and `treespec generate`
# streams a completion through them.
#
#   tools/container_build.sh [demo|cuda]    (default demo)
#
# demo: ghcr.io/treespec/treespec-demo:0.1.0 (CPU, models/demo baked in; the
#       k8s cpu-demo overlay). cuda: ghcr.io/treespec/treespec-cuda:0.1.0
#       (TREESPEC_CUDA=ON; needs BUILDER_IMAGE with nvcc and nccl.h and
#       BASE_IMAGE with the CUDA and NCCL runtime libraries, which are not
#       Debian packages; only the --help checks run; untested so far).
#
# Environment: SKIP_BUILD=1 (smoke-test the image already built),
# STORAGE_DRIVER (default vfs, which needs no overlay mounts),
# ISOLATION (default chroot, which needs no user namespaces), JOBS,
# BASE_IMAGE / BUILDER_IMAGE. When docker.io cannot be reached and no
# BASE_IMAGE is given, a Debian 12 base is made locally with debootstrap from
# the configured apt mirror (localhost/treespec-debian:bookworm).
set -euo pipefail
cd "$(dirname "$0")/.."
FLAVOR=${1:-demo}
export STORAGE_DRIVER=${STORAGE_DRIVER:-vfs}
ISOLATION=${ISOLATION:-chroot}
JOBS=${JOBS:-$(nproc)}
case "$FLAVOR" in
  demo) IMAGE=ghcr.io/treespec/treespec-demo:0.1.0; STAGE=demo; CUDA=OFF; UNPACKAGED=0 ;;
  cuda) IMAGE=ghcr.io/treespec/treespec-cuda:0.1.0; STAGE=runtime; CUDA=ON; UNPACKAGED=1 ;;
  *) echo "usage: $0 [demo|cuda]" >&2; exit 2 ;;
esac
if [ "$(id -u)" != 0 ]; then
  # buildah with chroot isolation and vfs storage, and debootstrap, run as root.
  if command -v sudo >/dev/null; then exec sudo -E bash "$PWD/tools/container_build.sh" "$@"; fi
  echo "$0 needs root (buildah with chroot isolation, debootstrap)" >&2
  exit 1
fi
if ! command -v buildah >/dev/null; then
  echo "installing buildah" >&2
  apt-get install -y -qq --no-install-recommends buildah >/dev/null
fi

# A Debian 12 base image: the registry's, else one bootstrapped here.
base_image() {
  if [ -n "${BASE_IMAGE:-}" ]; then echo "$BASE_IMAGE"; return; fi
  if buildah pull -q docker.io/library/debian:bookworm >/dev/null 2>&1; then
    echo docker.io/library/debian:bookworm
    return
  fi
  local local_image=localhost/treespec-debian:bookworm
  if ! buildah inspect --type image "$local_image" >/dev/null 2>&1; then
    echo "docker.io unreachable: bootstrapping $local_image with debootstrap" >&2
    command -v debootstrap >/dev/null ||
      apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
    local rootfs
    rootfs=$(mktemp -d)
    local mirror
    mirror=$(awk '/^URIs:/ {print $2; exit} /^deb / {print $2; exit}' \
      /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list 2>/dev/null | head -n 1)
    debootstrap --variant=minbase bookworm "$rootfs" "${mirror:-http://deb.debian.org/debian}" >&2
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    local ctr tarball
    tarball=$(mktemp --suffix=.tar)
    tar -C "$rootfs" -cf "$tarball" .
    ctr=$(buildah from scratch)
    buildah add "$ctr" "$tarball" / >/dev/null  # a local tar archive is unpacked
    buildah config --cmd /bin/bash "$ctr"
    buildah commit -q "$ctr" "$local_image" >/dev/null
    buildah rm "$ctr" >/dev/null
    rm -rf "$rootfs" "$tarball"
  fi
  echo "$local_image"
}

start=$(date +%s)
if [ "${SKIP_BUILD:-0}" = 1 ]; then  # smoke-test the image built last time
  echo "SKIP_BUILD=1: smoke-testing the existing $IMAGE" >&2
else
  BASE=$(base_image)
  BUILDER=${BUILDER_IMAGE:-$BASE}
  echo "base image: $BASE, builder image: $BUILDER" >&2
  buildah bud --isolation "$ISOLATION" --layers=false --target "$STAGE" \
    --build-arg BASE_IMAGE="$BASE" --build-arg BUILDER_IMAGE="$BUILDER" \
    --build-arg TREESPEC_CUDA="$CUDA" --build-arg ALLOW_UNPACKAGED="$UNPACKAGED" \
    --build-arg JOBS="$JOBS" \
    -f Containerfile -t "$IMAGE" .
fi
built=$(date +%s)
echo "image $IMAGE built in $((built - start)) s" >&2

ctr=$(buildah from "$IMAGE")
trap 'buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
in_image() { buildah run --isolation "$ISOLATION" --network host "$ctr" -- "$@"; }

uid=$(in_image id -u)
if [ "$uid" != 65532 ]; then echo "FAIL: image runs as uid $uid, not 65532" >&2; exit 1; fi
for bin in treespec-worker treespec-drafter treespec-coordinator treespec treespec-generate \
           treespec-logits treespec-loadgen treespec-convert-llama2c; do
  # absl's --help exits with status 1: the usage text is the check (a missing
  # shared library prints "error while loading shared libraries" instead).
  help=$(in_image "/usr/local/bin/$bin" --help 2>&1 || true)
  if ! grep -qi usage <<<"$help" || grep -q 'error while loading' <<<"$help"; then
    echo "FAIL: $bin --help" >&2
    tail -n 5 <<<"$help" >&2
    exit 1
  fi
  echo "ok: $bin --help"
done
if [ "$FLAVOR" != demo ]; then exit 0; fi

# Serve the demo target: worker + coordinator inside the image (host network),
# each under `timeout` as well, should the cleanup below miss one.
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
W=$(port); WH=$(port); C=$(port); CH=$(port)
logs=$(mktemp -d)
pids=()
# `buildah run` does not forward signals to what it runs, so stop the
# services themselves: every descendant of each `buildah run` started here.
descendants() {
  local child
  for child in $(ps -o pid= --ppid "$1" 2>/dev/null); do
    descendants "$child"
    echo "$child"
  done
}
cleanup() {
  local p
  for p in "${pids[@]}"; do
    # shellcheck disable=SC2046
    kill $(descendants "$p") "$p" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  buildah rm "$ctr" >/dev/null 2>&1 || true
}
trap cleanup EXIT
M=/opt/treespec/models/demo/target
buildah run --isolation "$ISOLATION" --network host "$ctr" -- timeout 600 \
  /usr/local/bin/treespec-worker --model "$M" --listen "127.0.0.1:$W" \
  --health-port "$WH" >"$logs/worker.log" 2>&1 &
pids+=($!)
buildah run --isolation "$ISOLATION" --network host "$ctr" -- timeout 600 \
  /usr/local/bin/treespec-coordinator --listen "127.0.0.1:$C" --health-port "$CH" \
  --workers "127.0.0.1:$W" --tokenizer "$M" >"$logs/coordinator.log" 2>&1 &
pids+=($!)
wait_port() {
  for _ in $(seq 1 120); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.5
  done
  return 1
}
for p in "$WH" "$W" "$CH" "$C"; do
  if ! wait_port "$p"; then
    echo "FAIL: port $p never opened" >&2
    tail -n 20 "$logs"/*.log >&2
    exit 1
  fi
done
echo "ok: worker and coordinator health ports $WH, $CH accept connections"
out=$(in_image /usr/local/bin/treespec generate --server "127.0.0.1:$C" \
  --prompt "Once upon a time" --max-tokens 8 --drafter none --json) || true
echo "$out" | tail -n 1
# The prompt was tokenized by the coordinator's SentencePiece plugin
# (/usr/local/lib) and the tokens came from the worker's demo target.
if ! echo "$out" | tail -n 1 | python3 -c '
import json, sys
j = json.loads(sys.stdin.read())
sys.exit(0 if j["prompt_tokens"] >= 2 and 1 <= j["completion_tokens"] <= 8 and j["text"] else 1)'
then
  echo "FAIL: no completion from the image's coordinator and worker" >&2
  tail -n 20 "$logs"/*.log >&2
  exit 1
fi
echo "ok: generate through the image's coordinator and worker; total $(($(date +%s) - start)) s"

#!/usr/bin/env bash
# Prints the Debian packages that hold the shared libraries the given ELF files
# load (ldd, then dpkg -S), one per line: what the runtime stage of the
# Containerfile installs. Fails naming a library no package holds (e.g. one
# from a CUDA toolkit outside Debian), unless ALLOW_UNPACKAGED=1.
set -euo pipefail
libs=$(ldd "$@" | awk '/=> \// {print $3}' | sort -u)
pkgs=""
missing=0
for lib in $libs; do
  # Packages of a merged-/usr system may register /lib/... for /usr/lib/....
  pkg=$(dpkg -S "$lib" 2>/dev/null || dpkg -S "${lib#/usr}" 2>/dev/null ||
        dpkg -S "$(readlink -f "$lib")" 2>/dev/null || true)
  if [ -z "$pkg" ]; then
    echo "no Debian package holds $lib" >&2
    missing=1
    continue
  fi
  pkgs="$pkgs ${pkg%%:*}"
done
printf '%s\n' $pkgs | sort -u
if [ "$missing" = 1 ] && [ "${ALLOW_UNPACKAGED:-0}" != 1 ]; then exit 1; fi

#!/bin/sh
# Install what bench/harness.py needs from Debian: wrk (the load generator) and
# taskset (util-linux, for pinning); with the argument valgrind, valgrind too
# (bench/icount.py). Idempotent: does nothing when all exist.
set -eu

missing=""
command -v wrk >/dev/null 2>&1 || missing="$missing wrk"
command -v taskset >/dev/null 2>&1 || missing="$missing util-linux"
for extra in "$@"; do
    case "$extra" in
        valgrind) command -v callgrind_control >/dev/null 2>&1 || missing="$missing valgrind" ;;
        *) echo "bench/setup.sh: unknown extra $extra" >&2; exit 2 ;;
    esac
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    echo "bench/setup.sh: missing:$missing; run as root or: sudo apt-get install -y$missing" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# Try the cached package lists first; refresh them only if that fails.
# shellcheck disable=SC2086
apt-get install -y -q $missing || { apt-get update -q && apt-get install -y -q $missing; }

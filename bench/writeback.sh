#!/usr/bin/env bash
# writeback.sh — what a durable store costs against the writeback every stored byte gets
# anyway: bench/writeback.c on ext4 over a loop device in /dev/shm (the filesystem of
# `bench/proxy.py --cache-fs ram`), in three ways, alternating, ROUNDS times:
#   flush            group syncfs every 1,000 files, then the renames (linerate's default)
#   none, deferred   no flush, the kernel's writeback thresholds as they are (10 % of
#                    memory: gigabytes, so little of the run is written back within it:
#                    what a server that never flushes costs in a short benchmark)
#   none, steady     no flush, written back from 64 MiB dirty on (vm.dirty_background_bytes):
#                    what it costs once a cache has filled for longer than it takes to
#                    dirty a tenth of memory, when every byte stored is written back
#   tmpfile          as flush, files created unnamed (O_TMPFILE) and linked, not renamed
# Needs root (mount, sysctl); restores the sysctl and unmounts at exit.
#
#   sudo bench/writeback.sh [FILES] [SIZE] [ROUNDS]     # default 40000 65536 2
set -euo pipefail
FILES=${1:-40000}
SIZE=${2:-65536}
ROUNDS=${3:-2}
CPU=${WRITEBACK_CPU:-0}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/linerate-writeback.XXXXXX)
img=/dev/shm/linerate-writeback.img
saved_bytes=$(cat /proc/sys/vm/dirty_background_bytes)
saved_ratio=$(cat /proc/sys/vm/dirty_background_ratio)

thresholds_as_they_were() {  # writing one of the pair zeroes the other
    if [ "$saved_bytes" != 0 ]; then
        echo "$saved_bytes" > /proc/sys/vm/dirty_background_bytes
    else
        echo "$saved_ratio" > /proc/sys/vm/dirty_background_ratio
    fi
}

restore() {
    thresholds_as_they_were
    umount "$work/mnt" 2>/dev/null || true
    rm -f "$img"
    rm -rf "$work"
}
trap restore EXIT

gcc -O2 -Wall -o "$work/writeback" "$here/writeback.c"
truncate -s 8G "$img"
mkfs.ext4 -q -F "$img"
mkdir "$work/mnt"
mount -o loop,discard "$img" "$work/mnt"
echo "ext4 over $img at $work/mnt; $FILES files of $SIZE bytes per run, pinned to CPU $CPU"

run() {  # NAME MODE
    local dir="$work/mnt/run"
    mkdir -p "$dir"
    sync
    printf '%-16s ' "$1"
    taskset -c "$CPU" "$work/writeback" "$dir" "$2" "$FILES" "$SIZE" 1000
    rm -rf "$dir"
    sync
    fstrim "$work/mnt" || true
}

for r in $(seq "$ROUNDS"); do
    run "flush" flush
    run "tmpfile" tmpfile
    run "none, deferred" none
    echo $((64 << 20)) > /proc/sys/vm/dirty_background_bytes
    run "none, steady" none
    thresholds_as_they_were
done

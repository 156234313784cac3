#!/usr/bin/env bash
# gpu-repack.sh: after ../shared/tools/gpu-pack, recompresses .gpu/bin.tar.gz with xz so
# that it fits the device tool's 64 MiB carry limit beside the tracked tree (gzip: about
# 55 MiB; xz -6: about 20 MiB, 50 s on 2 cores, measured 2026-11-26 with 52 test binaries
# and 11 programs; -9 makes it 15 MiB in twice the time).
#
#   bash scripts/gpu-repack.sh        # writes .gpu/bin.tar.xz and removes .gpu/bin.tar.gz
#
# On the GPU machine, unpack it with `tar xJf .gpu/bin.tar.xz -C .gpu` before
# `bash .gpu/run.sh` (which then finds .gpu/bin and skips its own unpacking). Carry
# [".gpu/bin.tar.xz", ".gpu/run.sh", ".gpu/test-list"] and any script of your own.
set -euo pipefail
[[ -f .gpu/bin.tar.gz ]] || { echo "gpu-repack: .gpu/bin.tar.gz not found: run gpu-pack first" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar xzf .gpu/bin.tar.gz -C "$work"
XZ_OPT="-6 -T0" tar cJf .gpu/bin.tar.xz -C "$work" bin
rm -f .gpu/bin.tar.gz
echo "gpu-repack: .gpu/bin.tar.xz, $(( $(stat -c %s .gpu/bin.tar.xz) >> 20 )) MiB"

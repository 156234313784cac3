#!/usr/bin/env bash
# gpu-suite.sh: the packed GPU test binaries (.gpu/test-list, written by
# ../shared/tools/gpu-pack) run in order within a time budget, so that a suite longer than
# one device call runs in several: each call starts where the last one stopped.
#
# Runs ON the GPU machine, from the repository root, after the binaries are unpacked
# (`tar xJf .gpu/bin.tar.xz -C .gpu` after scripts/gpu-repack.sh):
#
#   bash scripts/gpu-suite.sh --budget 420            # from the first binary
#   bash scripts/gpu-suite.sh --budget 420 --from 57  # the next call: what the last one printed
#
# A binary is started only while the budget has time left, and is given only that time
# (`timeout`); one cut short is reported as such and is where the next call starts. Each
# binary runs with --include-ignored and STREAM_CORE_REQUIRE_GPU=1, as .gpu/run.sh runs
# them. At the end: the totals of the `test result` lines, the binaries that exited
# non-zero (a crash leaves no `test result` for the tests it cut off, so the totals alone
# would not show it), each failed test with where it panicked and its message's first
# line ("gpu-suite: failed: ..."), then either "gpu-suite: every binary ran" or "gpu-suite: next:
# --from K". Exit status 1 when a test failed or a binary exited non-zero (other than
# being cut short), else 0.
set -u
budget=420
from=1
list=.gpu/test-list
while [[ $# -gt 0 ]]; do
  case $1 in
    --budget) budget=$2; shift 2 ;;
    --from) from=$2; shift 2 ;;
    --list) list=$2; shift 2 ;;
    *) echo "gpu-suite: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
[[ -f $list ]] || { echo "gpu-suite: $list not found: run gpu-pack and unpack first" >&2; exit 2; }
export STREAM_CORE_REQUIRE_GPU=1 RUST_BACKTRACE=1
mapfile -t binaries < "$list"
start=$SECONDS
passed=0
failed=0
status=0
next=""
broken=()
crashes=()
failures=()
for ((i = from; i <= ${#binaries[@]}; i++)); do
  t=${binaries[i - 1]}
  left=$((budget - (SECONDS - start)))
  if ((left < 5)); then
    next=$i
    break
  fi
  echo "=== $i $t"
  out=$(mktemp)
  timeout "$left" "$t" --include-ignored > "$out" 2>&1
  rc=$?
  cat "$out"
  while read -r p f; do
    passed=$((passed + p))
    failed=$((failed + f))
  done < <(grep "^test result" "$out" | awk '{print $4, $6}')
  if ((rc == 124 || rc == 137)); then
    echo "gpu-suite: $t cut short by the budget"
    rm -f "$out"
    next=$i
    break
  fi
  # Each failed test with where it panicked and the first line of its message, for the
  # summary (a long log's tail may not reach back to libtest's failure sections).
  while read -r line; do failures+=("$(basename "$t"): $line"); done < <(awk '
    /^---- .* stdout ----$/ { name = $2; want = 1; next }
    want && / panicked at / { where = $NF; getline message; print name " (" where ") " message; want = 0 }
  ' "$out")
  if ((rc != 0)); then
    status=1
    # A binary that died (a signal: rc 128 + its number) prints no `test result` for the
    # tests it had left: the totals alone would not show it.
    echo "gpu-suite: $t exited with status $rc$( ((rc > 128)) && echo " (signal $((rc - 128)))")"
    broken+=("$(basename "$t") (status $rc)")
    # The harness's crash report names the tests that were running (tests/support/crash_report.rs).
    while read -r line; do crashes+=("$(basename "$t"): $line"); done < <(grep -a "gpu-tests: fatal signal" "$out")
  fi
  rm -f "$out"
done
((failed > 0)) && status=1
echo "gpu-suite: passed $passed failed $failed in $((SECONDS - start)) s"
if ((${#broken[@]} > 0)); then
  echo "gpu-suite: ${#broken[@]} binary(ies) exited non-zero: ${broken[*]}"
fi
for line in "${failures[@]}"; do echo "gpu-suite: failed: $line"; done
for line in "${crashes[@]}"; do echo "gpu-suite: $line"; done
if [[ -n $next ]]; then
  echo "gpu-suite: next: --from $next"
else
  echo "gpu-suite: every binary ran"
fi
exit $status

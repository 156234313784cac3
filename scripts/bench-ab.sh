#!/usr/bin/env bash
# bench-ab.sh: two builds of `bench` alternated in one run, for a change's effect on
# rows whose noise between machines (and between runs on one) is larger than the change:
# before, after, before, after, ... each with the same cases, and the chosen rows of
# each printed side by side in the order they ran.
#
# Build the "before" bench from the base commit in a worktree of its own
# (CARGO_TARGET_DIR=/tmp/before-target cargo build --release -p benchmarks), strip both
# binaries into a folder the device tool carries, and run ON the GPU machine:
#
#   bash scripts/bench-ab.sh .gpu/m/bench-before .gpu/m/bench-after nccl,scope 3 \
#       'enqueue one 4-byte all_reduce, 1 rank|enter \+ exit on an idle'
#
# Arguments: the two binaries, the cases (`bench --case`), how many rounds of the pair,
# and an extended regular expression for the rows to print (all rows when empty). Each
# run's whole output goes to $OUT/<before|after>-<round>.log when $OUT is set. At the end,
# per row: the median of ours/raw over the rounds of each side, with the lowest and the
# highest.
set -euo pipefail
if [[ $# -lt 4 ]]; then
    sed -n '2,16p' "$0" >&2
    exit 2
fi
before=$1 after=$2 cases=$3 rounds=$4 rows=${5:-}
logs=${OUT:-$(mktemp -d)}
mkdir -p "$logs"
for ((round = 1; round <= rounds; round++)); do
    for side in before after; do
        binary=$before
        [[ $side == after ]] && binary=$after
        log="$logs/$side-$round.log"
        if ! timeout 300 "$binary" --case "$cases" > "$log" 2>&1; then
            echo "== $side $round: bench failed (its output: $log)"
            tail -3 "$log"
            continue
        fi
        echo "== $side $round"
        # The per-row lines (two spaces, the case, a colon), without the spread.
        grep -E "^  [a-z_-]+: " "$log" | grep -E "${rows:-.}" | sed -E 's/ \(min.*//' |
            tee -a "$logs/rows-$side.txt"
    done
done
echo "== ours/raw per row over the rounds: median (lowest-highest)"
for side in before after; do
    [[ -f $logs/rows-$side.txt ]] || continue
    sed -nE 's/^  (.*\]): .*ours\/raw ([0-9.]+)x.*/\1\t\2/p' "$logs/rows-$side.txt" |
        sort -t$'\t' -k1,1 -k2,2n |
        awk -F'\t' -v side="$side" '
            function flush() {
                if (n == 0) return
                m = (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
                printf "%s\t%s\t  %-6s %.3fx (%.3fx-%.3fx, %d rounds)\n", row,
                    (side == "before") ? 1 : 2, side, m, v[1], v[n], n
            }
            $1 != row { flush(); row = $1; n = 0 }
            { v[++n] = $2 }
            END { flush() }'
done | sort -t$'\t' -k1,1 -k2,2n -s | awk -F'\t' '$1 != last { print $1; last = $1 } { print $3 }'

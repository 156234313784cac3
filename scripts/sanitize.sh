#!/usr/bin/env bash
# sanitize.sh: the packed GPU test binaries and programs under compute-sanitizer's
# memcheck, racecheck, synccheck and initcheck; fails on any reported error.
#
# Runs ON the GPU machine, from the repository root, after `../shared/tools/gpu-pack`
# has packed the binaries into .gpu/ here (the device call carries [".gpu"]):
#
#   bash scripts/sanitize.sh                         # all four tools, every target
#   bash scripts/sanitize.sh memcheck                # one tool (what fits one device call)
#   bash scripts/sanitize.sh racecheck,synccheck --only test_gemm --filter sgemm
#   bash scripts/sanitize.sh initcheck --budget 540  # stop starting runs after 9 minutes
#   bash scripts/sanitize.sh --budget 540 --coverage .gpu/sanitize-coverage.tsv
#                       # everything, in pieces of at most 10 minutes: see "Pieces" below
#   bash scripts/sanitize.sh --gpus 2 --budget 540 --coverage .gpu/sanitize-coverage.tsv
#                       # the same, two pieces at once on two GPUs
#
# Arguments:
#   TOOLS               comma-separated subset of memcheck,racecheck,synccheck,initcheck
#                       (default: all four, one after the other)
#   --only REGEX        run only the targets whose name matches (extended regex)
#   --skip REGEX        also skip the targets whose name matches
#   --filter TEXT       test-name filter passed to every test binary
#   --no-tests          programs only;  --no-programs: test binaries only
#   --timeout SECONDS   limit of one run (one tool on one target; default 300)
#   --budget SECONDS    start no run after this many seconds; runs left out make the
#                       result INCOMPLETE (exit 1)
#   --log-dir DIR       where the logs go (default: $OUT/sanitize when $OUT is set,
#                       else .gpu/sanitize)
#   --api-errors MODE   compute-sanitizer's --report-api-errors (default: no; see below)
#   --coverage FILE     record every finished run in FILE (tab-separated: tool, target,
#                       verdict, seconds, piece, summary) and skip the runs FILE already
#                       records; see "Pieces"
#   --gpus N            with --coverage: N pieces at once, one per GPU (CUDA_VISIBLE_DEVICES
#                       0..N-1), the tools dealt round-robin between them; their records
#                       are merged into FILE (see "Pieces")
#   --skip-nccl-kernels initcheck only: leave NCCL's own kernels (ncclDevKernel*)
#                       unchecked (compute-sanitizer --kernel-name-exclude), for
#                       programs that all-reduce across two or more GPUs (see below)
#
# Targets: every test binary of .gpu/test-list (run with --include-ignored and
# STREAM_CORE_REQUIRE_GPU=1, as .gpu/run.sh does) and every program in .gpu/bin.
#
# Target names are the test binary's name without its hash (test_kernels, stream_core,
# ...) and the program's name (quickstart, soak, ...; a program named as a test binary
# gets "_program" after its name: kernels_program, the example beside the kernels
# crate's tests).
#
# Skipped by default, and why:
#   test_faults, test_faults_modules   their kernels fault on purpose (`__trap()`, a store to an unmapped
#                 address), which every tool reports; it runs each fault in a child
#                 process and checks the library's behaviour itself (bash .gpu/run.sh).
#   bench*        benchmark programs: long timing loops, nothing they check.
# Run in a short mode: soak (--seconds 20 --threads 2 --max-mib 8), graphs (--steps 20:
# its 300 steps of 100 kernels, launched and replayed, passed 300 s under racecheck) and
# kernels_program (--size 512: its 80 timed SGEMMs at 4096^3 passed 387 s under racecheck,
# 0 hazards so far; the 515x257x129 check of the tile edges runs either way).
#
# CUDA API calls that return an error are not counted (--report-api-errors no): the
# tests provoke them on purpose (out of memory, a missing kernel, malformed PTX, no
# visible device, an event polled before it completes), and the library turns every
# one into an `Err` that the tests check. What the tools count is what only they can
# see: device memory errors and leaks, shared-memory races, barrier misuse, and reads
# of uninitialised device memory. `--api-errors explicit` lists the API errors too
# (for reading, not for a verdict: the deliberate ones make it fail).
#
# Durations. One device call runs at most 10 minutes: use --budget (e.g. 540) so that
# the script reports what it could not run instead of being killed. Measured on 2x H200
# (compute-sanitizer 2025.3.1, 2026-11-26, tests/sanitize/results/): every tool's pass
# over everything takes 150 to 560 s; the slowest runs were the NCCL tests (20-60 s),
# data_parallel (53 s under racecheck), test_fills under initcheck (211 s) and
# test_scope under racecheck (past 300 s). The loads behind the last two are lighter
# under a tool now (gpu_tests::load: test_fills's and test_kernels's largest lengths,
# test_scope's eight-thread scopes), as test_async's are; initcheck had earlier stalled
# in test_kernels at 2^24 + 3 doubles. Later pieces (2026-11-26): the graphs example took
# over 300 s under racecheck (now --steps 20: 23 s), initcheck had not finished
# test_nccl in 500 s (4 of its 13 tests; its big cases are 1 MiB under a tool now: 46 s,
# 14 tests, on a 2x H100 host), and the kernels example passed 387 s under racecheck
# (now --size 512: 50 s). The whole coverage, every tool over every target, 0 errors:
# tests/sanitize/results/2026-11-26-coverage.tsv.
#
# Pieces. All four tools over every target take far longer than the 10 minutes one
# device call may run. With --coverage FILE and --budget (540 leaves a minute for the
# call's start and the logs), each call runs what FILE does not yet record, within the
# budget (a run's limit is cut to what is left of it, so a piece never overruns), and
# appends what it covered, labelled with the piece's start time. Copy FILE back from
# $OUT after each call and carry it to the next (e.g. as .gpu/sanitize-coverage.tsv);
# repeat until the script says nothing is left. A run that the piece's budget cut short
# is not recorded: the next piece starts it again with its whole --timeout. Two pieces
# may run at once on two GPUs (CUDA_VISIBLE_DEVICES, a coverage file and --log-dir each;
# split the tools between them); --gpus N does that itself and merges the records. A
# piece on one visible GPU runs the two-GPU tests' one-GPU parts only (test_nccl,
# test_peer, test_trace and data_parallel register or run less). The exit status is then that of the
# whole coverage: 0 only when every recorded run passed. A piece that leaves runs for
# the next one exits 3.
#
# With two GPUs visible, initcheck fails every program whose ranks all-reduce with NCCL's
# LL protocol, on NCCL's own memory: data_parallel (two ranks, 2x H200, 2026-11-28) gave
# 113,900 reports, every one in ncclDevKernel_AllReduce_Sum_f32_RING_LL reading 8 or 16
# bytes of NCCL's connection buffers (the LL protocol polls lines of data and flag that
# the peer has not written yet), and 0 with one GPU visible; memcheck (no leak),
# racecheck and synccheck found nothing on two GPUs
# (tests/sanitize/results/2026-11-28-data-parallel-two-gpus.txt). --skip-nccl-kernels
# leaves NCCL's kernels out of initcheck: data_parallel on two GPUs then has 0 reports
# (its collectives are in place, on buffers the example's kernels wrote first), and so
# has test_nccl_groups; but a buffer that only NCCL's unchecked kernels wrote reads as
# uninitialised to the tool, so test_nccl_gather_scatter and test_nccl_all_to_all (fresh
# receive buffers) still report about 2,050 each, every one a download of a buffer only
# NCCL wrote (read on 2x H200,
# tests/sanitize/results/2026-11-28-initcheck-nccl-kernels-skipped.txt). Use it for
# programs whose NCCL buffers are written by the program before each collective.
#
# The runs see STREAM_CORE_SANITIZER=<tool>: test binaries with load tests use lighter
# loads under it (gpu_tests::load; test_async's 10,000 concurrent requests become 300),
# still checking every result.
#
# Records of past coverage (the FILE of each session, tools merged): tests/sanitize/results/.
#
# Each run's compute-sanitizer report is $LOG_DIR/<tool>/<target>.<pid>.log (one per
# process) and the target's own output $LOG_DIR/<tool>/<target>.out. Per run the script
# prints the tool's summary line; at the end one line per tool, and PASS or FAIL.
#
# Exit status: 0 when every run reported "ERROR SUMMARY: 0 errors" (racecheck also "0
# hazards") and every target itself succeeded; 1 otherwise (errors, a failing target,
# a timeout, a run without a report, or runs left out by --budget); 2 on a usage error
# or when compute-sanitizer cannot be found.
set -u

all_tools=(memcheck racecheck synccheck initcheck)
tools=()
only=""
skip='^(test_faults|test_faults_modules|bench.*)$'
filter=()
# Tests that check that two streams really ran at the same time (or that DMA was still
# in flight at a given moment). The sanitizers serialise kernels and copies, so these
# tests cannot hold under them (measured: "stream A was idle when B's scope ended");
# they are about timing, not memory, and run in the normal suite.
observes_concurrency=(
  scope_on_b_completes_while_a_long_kernel_runs_on_a                     # test_scope
  scope_on_another_thread_completes_while_a_long_kernel_runs_on_a        # test_scope
  fork_returns_while_the_childs_long_kernel_is_still_running             # test_fork
  panic_in_a_nested_scope_completes_the_downloads_of_both_scopes         # test_panics
  panic_in_a_forked_child_completes_the_childs_and_the_parents_downloads # test_panics
  staged_download_returns_before_its_copy_out_and_wait_delivers_every_byte  # test_staged_download
  no_tokio_worker_waits_while_a_long_kernel_runs                         # test_async_waiting
  no_mini_executor_worker_waits_while_a_long_kernel_runs                 # test_async_waiting
  head_of_line_bypass_on_tokio_resolves_a_short_operation_before_a_long_one_of_another_stream         # test_async_waiting
  head_of_line_bypass_on_mini_executor_resolves_a_short_operation_before_a_long_one_of_another_stream # test_async_waiting
  a_slice_last_written_on_another_cudarc_stream_is_read_after_that_kernel  # test_cudarc
  a_stop_that_ran_before_the_start_is_an_error  # test_timer: its stop, on an idle stream, must run before its start behind a spin on another
  an_urgent_kernel_finishes_while_a_low_priority_queue_drains  # test_stream_priorities (failed under racecheck, H200, 2026-11-26)
  work_that_overlaps_on_the_gpu_overlaps_in_the_trace  # test_trace
  polling_resolves_a_short_operation_before_a_long_one_of_another_stream_without_the_bypass  # test_async_polling
  a_polling_thread_with_nothing_in_flight_sleeps  # test_async_polling: the process's CPU time, which a tool's own threads add to
  # Failed their own preconditions under initcheck (H200, 2026-11-26; 0 errors found), which
  # returned from each spin's launch only once the spin had run: nothing was left running.
  staging_block_is_not_reused_while_a_long_kernel_delays_its_copy  # test_staging: "the kernel had already finished"
  out_of_memory_retry_waits_for_this_threads_pending_frees  # test_out_of_memory: "`outer` must still be spinning"
  # Compares the GPU time of four spins with one's, which a tool's per-launch work distorts
  # (initcheck, H200, 2026-11-26: four spins 127 ms, one 50.7 ms).
  a_timer_measures_the_gpu_time_of_the_work_between_its_ends  # test_timer
)
# Tests that leak on purpose (`mem::forget` of a future or of a capture's buffer, whose
# leak is the documented outcome): memcheck's leak check reports them (measured on an
# H100: 36864 bytes of pinned blocks in the forget tests, then in test_async and now in
# test_async_release, one 4 KiB graph allocation in test_graphs, and nothing else in
# either binary without them; on an H200, 2026-11-24: 73728 bytes, 36864 per executor's
# forget test). Skipped under memcheck.
leaks_on_purpose=(
  forgotten_future_on_tokio_leaks_its_buffer_and_the_stream_keeps_working          # test_async_release
  forgotten_future_on_mini_executor_leaks_its_buffer_and_the_stream_keeps_working  # test_async_release
  forgotten_future_that_rang_the_doorbell_leaks_its_buffer_and_the_stream_keeps_working # test_async_release
  a_buffer_forgotten_in_a_capture_does_not_break_later_replays           # test_graphs
)
want_tests=1
want_programs=1
run_timeout=300
budget=0
log_dir=""
api_errors=no
coverage=""
gpus=1
skip_nccl=0
passthrough=() # the options a --gpus piece is given again

usage() { sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

while (($#)); do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --only) only="$2"; passthrough+=("$1" "$2"); shift 2 ;;
    --skip) skip="$skip|$2"; passthrough+=("$1" "$2"); shift 2 ;;
    --filter) filter=("$2"); passthrough+=("$1" "$2"); shift 2 ;;
    --no-tests) want_tests=0; passthrough+=("$1"); shift ;;
    --no-programs) want_programs=0; passthrough+=("$1"); shift ;;
    --timeout) run_timeout="$2"; passthrough+=("$1" "$2"); shift 2 ;;
    --budget) budget="$2"; passthrough+=("$1" "$2"); shift 2 ;;
    --log-dir) log_dir="$2"; shift 2 ;;
    --api-errors) api_errors="$2"; passthrough+=("$1" "$2"); shift 2 ;;
    --coverage) coverage="$2"; shift 2 ;;
    --gpus) gpus="$2"; shift 2 ;;
    --skip-nccl-kernels) skip_nccl=1; passthrough+=("$1"); shift ;;
    -*) echo "sanitize: unknown option $1 (see --help)" >&2; exit 2 ;;
    *)
      IFS=, read -r -a named <<< "$1"
      for t in "${named[@]}"; do
        case "$t" in
          memcheck|racecheck|synccheck|initcheck) tools+=("$t") ;;
          *) echo "sanitize: unknown tool '$t': use memcheck, racecheck, synccheck, initcheck" >&2; exit 2 ;;
        esac
      done
      shift ;;
  esac
done
((${#tools[@]})) || tools=("${all_tools[@]}")

# Verdict of a coverage FILE: prints the not-ok runs; 0 when every run passed.
coverage_verdict() {
  local file=$1 bad recorded
  recorded=$(grep -c . "$file" 2>/dev/null || true)
  bad=$(awk -F'\t' '$3 != "ok"' "$file" | wc -l)
  echo "sanitize: $file records $recorded runs, $bad of them not ok:"
  awk -F'\t' '$3 != "ok" {print "  " $1 " " $2 ": " $3 " (" $6 ")"}' "$file"
  ((bad == 0))
}

if ((gpus > 1)); then
  [[ -n "$coverage" ]] || { echo "sanitize: --gpus needs --coverage FILE" >&2; exit 2; }
  touch "$coverage" || { echo "sanitize: cannot write the coverage file $coverage" >&2; exit 2; }
  base_log=${log_dir:-${OUT:+$OUT/sanitize}}
  base_log=${base_log:-.gpu/sanitize}
  mkdir -p "$base_log"
  pids=(); parts=()
  for ((g = 0; g < gpus; g++)); do
    part=()
    for ((i = g; i < ${#tools[@]}; i += gpus)); do part+=("${tools[i]}"); done
    ((${#part[@]})) || continue
    cp "$coverage" "$coverage.gpu$g"
    CUDA_VISIBLE_DEVICES=$g bash "$0" "$(IFS=,; echo "${part[*]}")" "${passthrough[@]}" \
      --coverage "$coverage.gpu$g" --log-dir "$base_log/gpu$g" > "$base_log/gpu$g.txt" 2>&1 &
    pids+=($!); parts+=("$g")
  done
  left=0
  for k in "${!pids[@]}"; do
    wait "${pids[k]}"; rc=$?
    g=${parts[k]}
    echo "=== GPU $g (exit $rc)"
    cat "$base_log/gpu$g.txt"
    ((rc == 3)) && left=1
    ((rc == 2)) && { echo "sanitize: the piece on GPU $g could not start" >&2; exit 2; }
  done
  # Each piece only appended to its copy of FILE: its new lines are what it covered.
  before=$(grep -c . "$coverage" || true)
  for g in "${parts[@]}"; do
    tail -n +$((before + 1)) "$coverage.gpu$g" >> "$coverage"
    rm -f "$coverage.gpu$g"
  done
  echo "=== merged"
  if ((left)); then
    coverage_verdict "$coverage"
    echo "sanitize: INCOMPLETE: runs are left for the next piece (run again with --coverage $coverage)"
    exit 3
  fi
  coverage_verdict "$coverage" && { echo "sanitize: PASS (every run of the coverage: zero errors, every target succeeded)"; exit 0; }
  echo "sanitize: FAIL"
  exit 1
fi

find_sanitizer() {
  local c
  for c in "${COMPUTE_SANITIZER:-}" "$(command -v compute-sanitizer 2>/dev/null)" \
           /usr/local/cuda/bin/compute-sanitizer \
           $(ls -d /usr/local/cuda-*/bin/compute-sanitizer 2>/dev/null | sort -V -r) \
           /usr/local/cuda/compute-sanitizer/compute-sanitizer \
           /opt/nvidia/compute-sanitizer/compute-sanitizer; do
    [[ -n "$c" && -x "$c" ]] && { echo "$c"; return 0; }
  done
  return 1
}
sanitizer=$(find_sanitizer) || {
  echo "sanitize: compute-sanitizer not found (looked on PATH, in /usr/local/cuda*/bin and" \
       "/opt/nvidia); set COMPUTE_SANITIZER=/path/to/compute-sanitizer" >&2
  exit 2
}
[[ -f .gpu/test-list ]] || {
  echo "sanitize: .gpu/test-list not found: run ../shared/tools/gpu-pack on the build machine" \
       "first and carry .gpu to this one (run from the repository root)" >&2
  exit 2
}
log_dir=${log_dir:-${OUT:+$OUT/sanitize}}
log_dir=${log_dir:-.gpu/sanitize}
mkdir -p "$log_dir"
echo "sanitize: $("$sanitizer" --version 2>/dev/null | grep -m1 -i version || echo "$sanitizer")"
budget_note=""; ((budget > 0)) && budget_note=", budget ${budget}s"
echo "sanitize: tools ${tools[*]}; logs in $log_dir; limit ${run_timeout}s per run$budget_note"

# Targets: "name<TAB>path<TAB>kind".
targets=()
if ((want_tests)); then
  while read -r path; do
    [[ -n "$path" ]] || continue
    base=$(basename "$path"); base=${base#test-}; name=${base%-*}
    targets+=("$name"$'\t'"$path"$'\t'test)
  done < .gpu/test-list
fi
if ((want_programs)); then
  for path in .gpu/bin/*; do
    name=$(basename "$path")
    [[ "$name" == test-* || ! -x "$path" ]] && continue
    # A program named as a test binary (the `kernels` example beside the `kernels`
    # crate's tests) gets a name of its own: coverage records are keyed by name.
    printf '%s\n' "${targets[@]}" | grep -q "^$name"$'\t' && name="${name}_program"
    targets+=("$name"$'\t'"$path"$'\t'program)
  done
fi

program_args() { # extra arguments of a program under the sanitizer
  case "$1" in
    soak) echo "--seconds 20 --threads 2 --max-mib 8 --progress-secs 10" ;;
    graphs) echo "--steps 20" ;;
    kernels_program) echo "--size 512" ;;
    *) echo "" ;;
  esac
}

# Sums the numbers of the summary lines in the given reports.
count() { # $1 = regex with one number group (sed -E), files...
  local re="$1"; shift
  (($#)) || { echo 0; return; }
  sed -nE "s/.*$re.*/\1/p" "$@" 2>/dev/null | awk '{s += $1} END {print s + 0}'
}

start=$(date +%s)
piece=$(date -u +%Y%m%dT%H%M%SZ)
declare -A covered=()
if [[ -n "$coverage" ]]; then
  touch "$coverage" || { echo "sanitize: cannot write the coverage file $coverage" >&2; exit 2; }
  known=0
  while IFS=$'\t' read -r c_tool c_name c_verdict c_secs c_piece _; do
    [[ -n "$c_tool" ]] || continue
    covered["$c_tool $c_name"]="$c_verdict (piece $c_piece, ${c_secs}s)"
    known=$((known + 1))
  done < "$coverage"
  echo "sanitize: piece $piece; $coverage records $known runs already"
fi
left=0
failures=()
declare -A tool_errors tool_runs tool_hazards tool_leaks
for tool in "${tools[@]}"; do
  tool_errors[$tool]=0; tool_runs[$tool]=0; tool_hazards[$tool]=0; tool_leaks[$tool]=0
  mkdir -p "$log_dir/$tool"
  case "$tool" in
    memcheck) flags=(--leak-check full) ;;
    racecheck) flags=(--racecheck-report all) ;;
    initcheck) flags=(); ((skip_nccl)) && flags=(--kernel-name-exclude kns=ncclDevKernel) ;;
    *) flags=() ;;
  esac
  echo "=== $tool"
  for entry in "${targets[@]}"; do
    IFS=$'\t' read -r name path kind <<< "$entry"
    [[ -n "$only" && ! "$name" =~ $only ]] && continue
    if [[ "$name" =~ $skip ]]; then
      echo "    $(printf '%-22s' "$name") skipped (see the header of scripts/sanitize.sh)"
      continue
    fi
    if [[ -n "${covered["$tool $name"]:-}" ]]; then
      echo "    $(printf '%-22s' "$name") covered: ${covered["$tool $name"]}"
      continue
    fi
    limit=$run_timeout
    if ((budget > 0)); then
      remaining=$(( budget - ($(date +%s) - start) ))
      if ((remaining < 30)); then
        left=$((left + 1))
        [[ -n "$coverage" ]] || failures+=("$tool $name: not run (--budget ${budget}s spent)")
        echo "    $(printf '%-22s' "$name") NOT RUN: budget spent"
        continue
      fi
      ((remaining < limit)) && limit=$remaining
    fi
    if [[ $kind == test ]]; then
      args=(--include-ignored "${filter[@]}")
      for t in "${observes_concurrency[@]}"; do args+=(--skip "$t"); done
      if [[ $tool == memcheck ]]; then
        for t in "${leaks_on_purpose[@]}"; do args+=(--skip "$t"); done
      fi
    else
      read -r -a args <<< "$(program_args "$name")"
    fi
    rm -f "$log_dir/$tool/$name".*.log
    t0=$(date +%s)
    STREAM_CORE_REQUIRE_GPU=1 STREAM_CORE_SANITIZER=$tool RUST_BACKTRACE=1 \
      timeout --kill-after=30 "$limit" \
      "$sanitizer" --tool "$tool" "${flags[@]}" --error-exitcode 86 \
        --report-api-errors "$api_errors" --require-cuda-init no \
        --target-processes all --print-limit 200 \
        --log-file "$log_dir/$tool/$name.%p.log" \
        "$path" "${args[@]}" > "$log_dir/$tool/$name.out" 2>&1
    rc=$?
    secs=$(( $(date +%s) - t0 ))
    if ((rc == 124 || rc == 137)) && ((limit < run_timeout)) && [[ -n "$coverage" ]]; then
      # The budget, not the run, ran out: leave it unrecorded for the next piece,
      # which starts it with its whole --timeout.
      left=$((left + 1))
      echo "    $(printf '%-22s' "$name") CUT after ${secs}s (the piece's budget ran out): left for the next piece"
      continue
    fi
    reports=("$log_dir/$tool/$name".*.log)
    [[ -e "${reports[0]}" ]] || reports=()
    errors=$(count 'ERROR SUMMARY: ([0-9]+) error' "${reports[@]}")
    summary="ERROR SUMMARY: $errors errors"
    if [[ $tool == racecheck ]]; then
      hazards=$(count 'RACECHECK SUMMARY: ([0-9]+) hazard' "${reports[@]}")
      race_errors=$(count 'hazards? displayed \(([0-9]+) error' "${reports[@]}")
      race_warnings=$(count 'error[s]?, ([0-9]+) warning' "${reports[@]}")
      tool_hazards[$tool]=$(( ${tool_hazards[$tool]} + hazards ))
      summary="RACECHECK SUMMARY: $hazards hazards displayed ($race_errors errors, $race_warnings warnings); $summary"
      errors=$(( errors + hazards ))
    fi
    if [[ $tool == memcheck ]]; then
      leaked=$(count 'LEAK SUMMARY: ([0-9]+) bytes leaked' "${reports[@]}")
      tool_leaks[$tool]=$(( ${tool_leaks[$tool]} + leaked ))
      summary="$summary; LEAK SUMMARY: $leaked bytes leaked"
      errors=$(( errors + (leaked > 0) ))
    fi
    if [[ $kind == test ]]; then
      # What ran, so that a record shows the tests did (libtest's result lines).
      passed=$(count 'test result: .* ([0-9]+) passed' "$log_dir/$tool/$name.out")
      summary="$summary; $passed tests passed"
    fi
    tool_errors[$tool]=$(( ${tool_errors[$tool]} + errors ))
    tool_runs[$tool]=$(( ${tool_runs[$tool]} + 1 ))
    verdict=ok
    if ((rc == 124 || rc == 137)); then
      verdict="TIMEOUT after ${limit}s"
    elif ((${#reports[@]} == 0)); then
      verdict="NO REPORT (exit $rc)"
    elif ((errors > 0)); then
      verdict="ERRORS"
    elif ((rc != 0)); then
      verdict="TARGET FAILED (exit $rc; see $log_dir/$tool/$name.out)"
    fi
    [[ $verdict == ok ]] || failures+=("$tool $name: $verdict ($summary)")
    if [[ -n "$coverage" ]]; then
      printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$tool" "$name" "$verdict" "$secs" "$piece" "$summary" >> "$coverage"
    fi
    printf '    %-22s %-8s %4ss  %s\n' "$name" "$([[ $verdict == ok ]] && echo ok || echo FAIL)" "$secs" "$summary"
    if [[ $verdict != ok ]]; then
      echo "    $(printf '%-22s' '') -> $verdict"
      # The failing tests' own messages (libtest's "failures:" section), else the end.
      { grep -q '^failures:' "$log_dir/$tool/$name.out" \
          && sed -n '/^failures:/,/^test result/p' "$log_dir/$tool/$name.out" | head -n 40 \
          || tail -n 12 "$log_dir/$tool/$name.out"; } | sed 's/^/        | /'
    fi
  done
done

echo "=== summary"
for tool in "${tools[@]}"; do
  line="ERROR SUMMARY: ${tool_errors[$tool]} errors over ${tool_runs[$tool]} runs"
  [[ $tool == racecheck ]] && line="RACECHECK SUMMARY: ${tool_hazards[$tool]} hazards; $line"
  [[ $tool == memcheck ]] && line="$line; LEAK SUMMARY: ${tool_leaks[$tool]} bytes leaked"
  echo "$tool: $line"
done
if [[ -n "$coverage" ]]; then
  # The verdict of the whole coverage so far, not only of this piece.
  coverage_verdict "$coverage"; all_ok=$?
  if ((left > 0)); then
    echo "sanitize: INCOMPLETE: $left runs left for the next piece (run again with --coverage $coverage)"
    exit 3
  fi
  ((all_ok == 0)) && { echo "sanitize: PASS (every run of the coverage: zero errors, every target succeeded)"; exit 0; }
  echo "sanitize: FAIL"
  exit 1
fi
if ((${#failures[@]})); then
  echo "sanitize: FAIL"
  printf '  %s\n' "${failures[@]}"
  exit 1
fi
echo "sanitize: PASS (zero errors from every tool, every target succeeded)"

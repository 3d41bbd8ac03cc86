# Shell helpers of the multi-process e2e tests (pipeline_parallel.sh, tensor_parallel.sh, expert_parallel.sh),
# sourced after the caller sets H (the binary), W (the work folder), MPI (the mpirun command) and M (the model and
# training flags of every run). Optional: RUN_FLAGS (flags every run adds after M), ERROR_FLAGS (flags the runs of
# expect_error add after M), ITERS (iterations a run trains, default 20).
declare -p RUN_FLAGS > /dev/null 2>&1 || RUN_FLAGS=()
declare -p ERROR_FLAGS > /dev/null 2>&1 || ERROR_FLAGS=()
fail() { echo "FAIL: $*"; exit 1; }
run() {  # run NAME NP [extra flags]: ITERS iterations, saving into $W/NAME, logging $W/NAME.{log,jsonl}
  local name=$1 np=$2
  shift 2
  local cmd=("$H" train "${M[@]}" "${RUN_FLAGS[@]}" --train-iters "${ITERS:-20}" --save "$W/$name"
             --log-jsonl "$W/$name.jsonl" "$@")
  if [ "$np" = 1 ]; then HYTRA_NUM_THREADS=1 "${cmd[@]}" > "$W/$name.log" 2>&1; else
    "${MPI[@]}" -np "$np" "${cmd[@]}" > "$W/$name.log" 2>&1; fi || fail "$name: $(tail -5 "$W/$name.log")"
}
at10() {  # at10 RUN: a checkpoint folder $W/RUN@10 whose latest checkpoint is RUN's iteration 10
  mkdir -p "$W/$1@10" && cp -r "$W/$1/iter_0000010" "$W/$1@10/" &&
    echo 10 > "$W/$1@10/latest_checkpointed_iteration.txt"
}
expect_error() {  # expect_error NP TEXT [flags]: every rank stops before any iteration, the log naming TEXT
  local np=$1 text=$2
  shift 2
  "${MPI[@]}" -np "$np" "$H" train "${M[@]}" "${ERROR_FLAGS[@]}" --train-iters 4 "$@" > "$W/err.log" 2>&1 &&
    fail "trained: $*"
  grep -qF -- "$text" "$W/err.log" || fail "no error '$text' for $*: $(tail -3 "$W/err.log")"
  grep -q "iteration " "$W/err.log" && fail "an iteration ran before the error for $*"
  return 0
}

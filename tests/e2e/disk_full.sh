#!/usr/bin/env bash
# A save that runs out of space fails with the OS error and leaves the previous checkpoint and its
# tracker exactly as they were, with no temporary left behind. Two ways to run out: a file-size limit
# (ulimit -f, needs no privileges) and a small tmpfs in a private mount namespace (skipped, exit 77,
# where `unshare -Urm` is not allowed), sized so that the second of two saves fails at its tensors,
# its manifest or the tracker rewrite depending on the trial.
# Then a save into a file system remounted read-only: the OS error named, the previous checkpoint untouched.
# Usage: disk_full.sh HYTRA_BINARY
set -uo pipefail
H=$(realpath "$1")
ARGS=(train --hybrid-layer-pattern '*-*-' --hidden-size 64 --num-attention-heads 4 --ffn-hidden-size 128
      --normalization RMSNorm --position-embedding-type rope --disable-bias-linear --seq-length 32 --vocab-size 256
      --mock-data --micro-batch-size 2 --global-batch-size 2 --eval-iters 0 --lr 1e-3 --device cpu)
fail() { echo "FAIL: $*"; exit 1; }

# The checkpoint in $1 is iteration $2 and loads; nothing temporary is left beside it.
expect_intact() {
  [ "$(cat "$1/latest_checkpointed_iteration.txt")" = "$2" ] || fail "$1: tracker is '$(cat "$1/latest_checkpointed_iteration.txt")', expected $2"
  "$H" inspect-checkpoint "$1" > "$1.inspect" 2>&1 || fail "$1: inspect-checkpoint: $(cat "$1.inspect")"
  ! grep -q leftover "$1.inspect" || fail "$1: leftovers: $(grep leftover "$1.inspect")"
  ! ls "$1" | grep -q tmp || fail "$1: temporary files left: $(ls "$1")"
}

if [ "${2:-}" = "--inner" ]; then  # in the private namespace: mount, train with two saves, judge
  SIZE=$3 MNT=$4 err=$4.err  # (the log lives outside the full file system)
  mount -t tmpfs -o "size=$SIZE" tmpfs "$MNT" || exit 77
  cd "$MNT" || exit 1
  "$H" "${ARGS[@]}" --train-iters 2 --save ck --save-interval 1 > /dev/null 2> "$err"
  rc=$?
  if [ $rc -eq 0 ]; then expect_intact ck 2; echo "both saves fit"; exit 0; fi
  grep -q "No space left on device" "$err" || fail "rc $rc without the OS error: $(cat "$err")"
  if [ -f ck/latest_checkpointed_iteration.txt ]; then
    expect_intact ck 1
    echo "second save failed: $(grep -o '[^ ]*: [^:]*(No space left on device)' "$err" | head -1)"
  else
    ! ls ck 2>/dev/null | grep -q . || fail "first save failed but left: $(ls ck)"
    echo "first save failed"
  fi
  exit 0
fi

if [ "${2:-}" = "--inner-ro" ]; then  # in the private namespace: save, make the file system read-only, save again
  MNT=$3 err=$3.err
  mount -t tmpfs -o size=64m tmpfs "$MNT" || exit 77
  cd "$MNT" || exit 1
  "$H" "${ARGS[@]}" --train-iters 1 --save ck > /dev/null 2> "$err" || fail "first save: $(cat "$err")"
  mount -o remount,ro "$MNT" || exit 77
  "$H" "${ARGS[@]}" --train-iters 2 --load ck --save ck > /dev/null 2> "$err" && fail "a save into a read-only file system exited 0"
  grep -q "Read-only file system" "$err" || fail "the OS error is not named: $(cat "$err")"
  [ "$(cat ck/latest_checkpointed_iteration.txt)" = 1 ] || fail "the tracker moved: $(cat ck/latest_checkpointed_iteration.txt)"
  "$H" inspect-checkpoint ck > "$MNT.inspect" 2>&1 || fail "ck: inspect-checkpoint: $(cat "$MNT.inspect")"
  echo "read-only: $(tail -1 "$err")"
  exit 0
fi

W=$(mktemp -d /tmp/hytra-disk-full.XXXXXX)
trap 'rm -rf "$W"' EXIT

# 1. A file-size limit below the checkpoint's size, on the run that resumes and saves again.
"$H" "${ARGS[@]}" --train-iters 1 --save "$W/ck" > /dev/null 2>&1 || fail "first save"
(ulimit -f 64; "$H" "${ARGS[@]}" --train-iters 2 --load "$W/ck" --save "$W/ck" > /dev/null 2> "$W/err")
rc=$?
[ $rc -ne 0 ] || fail "a save past the file-size limit exited 0"
grep -q "File too large" "$W/err" || fail "the OS error is not named: $(cat "$W/err")"
expect_intact "$W/ck" 1
echo "file-size limit: $(cat "$W/err")"

# 2. A full tmpfs: room for the first checkpoint and about the second one's tensors.
unshare -Urm true 2> /dev/null || { echo "unshare -Urm not allowed here: tmpfs cases skipped"; exit 77; }
pages=0
for f in "$W"/ck/iter_0000001/*.safetensors; do pages=$((pages + ($(stat -c %s "$f") + 4095) / 4096)); done
second_failed=0
for extra in 0 1 2 3 4; do
  mkdir -p "$W/mnt$extra"
  out=$(unshare -Urm bash "$0" "$H" --inner $(((2 * pages + extra) * 4096)) "$W/mnt$extra") || fail "tmpfs trial $extra: $out"
  echo "tmpfs of 2 x $pages + $extra pages: $out"
  case $out in "second save failed"*) second_failed=$((second_failed + 1)) ;; esac
done
[ $second_failed -gt 0 ] || fail "no trial made the second save fail: the test did not exercise it"

# 3. A file system made read-only after the first save (root ignores a directory's permissions, a read-only mount
# it does not).
mkdir -p "$W/ro"
out=$(unshare -Urm bash "$0" "$H" --inner-ro "$W/ro") || fail "read-only trial: $out"
echo "$out"
echo "ok"

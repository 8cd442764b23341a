#!/usr/bin/env bash
# Builds the libFuzzer drivers (build-fuzz/, clang, ASan+UBSan) and runs
# each for a bounded time over its committed seed corpus and dictionary.
# New corpus entries go to a temporary directory, never into corpus/.
# Exits non-zero on any crash, leak, UBSan report, timeout or OOM; ends with
# a table of per-target figures and the line "fuzz: N passed, N failed".
#
# usage: tests/fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]
#   SECONDS_PER_TARGET  default 30; TARGET  e.g. token (default: all)
#   FUZZ_KEEP_CORPUS=DIR  keep the grown corpora under DIR/<target>/
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
FUZZ=$ROOT/tests/fuzz
BUILD=$ROOT/build-fuzz

secs=${1:-30}
case "$secs" in
  -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  ''|*[!0-9]*) echo "run.sh: SECONDS_PER_TARGET must be a number" >&2; exit 2 ;;
esac
shift $(( $# > 0 ? 1 : 0 ))

targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
  for f in "$FUZZ"/fuzz_*.c; do
    t=${f##*/fuzz_}; targets+=("${t%.c}")
  done
fi

# Longest input per target: a token is at most 256 characters (headers add
# quotes and spaces); JSON needs room for nesting past jansson's 2048 limit.
max_len() {
  case "$1" in
    token) echo 512 ;;
    headers) echo 1024 ;;
    json_request) echo 8192 ;;
    config) echo 16384 ;;
    *) echo 4096 ;;
  esac
}

command -v clang >/dev/null || { echo "run.sh: clang is missing (deploy/deps.sh --test)" >&2; exit 1; }

echo "==> building fuzzers in build-fuzz/"
bins=()
for t in "${targets[@]}"; do bins+=("fuzz_$t"); done
if ! { CC=clang cmake -S "$ROOT" -B "$BUILD" -DIDEMD_FUZZ=ON \
         -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
       cmake --build "$BUILD" -j"$(nproc)" --target "${bins[@]}" >/dev/null; }; then
  echo "run.sh: fuzz build failed" >&2
  echo "fuzz: 0 passed, ${#targets[@]} failed"
  exit 1
fi

TMP=$(mktemp -d /tmp/idemd-fuzz.XXXXXX) || exit 1
trap 'rm -rf "$TMP"' EXIT

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:symbolize=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
passed=0 failed=0 rows=()
for t in "${targets[@]}"; do
  bin=$BUILD/fuzz_$t
  if [ ! -x "$bin" ] || [ ! -d "$FUZZ/corpus/$t" ]; then
    echo "run.sh: no driver or corpus for '$t'" >&2
    failed=$((failed + 1)); rows+=("$t - - - - MISSING"); continue
  fi
  mkdir -p "$TMP/corpus/$t" "$TMP/artifacts"
  dict=()
  [ -f "$FUZZ/$t.dict" ] && dict=(-dict="$FUZZ/$t.dict")
  echo "==> fuzz_$t for ${secs}s"
  "$bin" -max_total_time="$secs" -max_len="$(max_len "$t")" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 "${dict[@]}" \
    -artifact_prefix="$TMP/artifacts/$t-" \
    "$TMP/corpus/$t" "$FUZZ/corpus/$t" >"$TMP/$t.log" 2>&1
  rc=$?
  execs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+).*/\1/p' "$TMP/$t.log" | tail -n 1)
  rate=$(sed -nE 's/^stat::average_exec_per_sec: *([0-9]+).*/\1/p' "$TMP/$t.log" | tail -n 1)
  cov=$(grep -oE ' cov: [0-9]+' "$TMP/$t.log" | tail -n 1 | tr -dc 0-9)
  ft=$(grep -oE ' ft: [0-9]+' "$TMP/$t.log" | tail -n 1 | tr -dc 0-9)
  corp=$(find "$TMP/corpus/$t" "$FUZZ/corpus/$t" -type f | wc -l)
  if [ "$rc" -eq 0 ] && ! grep -qE 'ERROR: (Address|Leak|Undefined)Sanitizer|runtime error:|==ERROR: libFuzzer|property failed' "$TMP/$t.log"; then
    verdict=ok; passed=$((passed + 1))
  else
    verdict="FAILED(rc=$rc)"; failed=$((failed + 1))
    echo "---- fuzz_$t: finding (log tail) ----"
    tail -n 60 "$TMP/$t.log"
    for a in "$TMP/artifacts/$t-"*; do
      [ -f "$a" ] || continue
      mkdir -p "$BUILD/artifacts"; cp "$a" "$BUILD/artifacts/"
      echo "input saved: build-fuzz/artifacts/${a##*/} ($(wc -c <"$a") bytes)"
      echo "hex: $(od -An -tx1 -v "$a" | tr -d ' \n' | head -c 2048)"
    done
  fi
  if [ -n "${FUZZ_KEEP_CORPUS:-}" ]; then
    mkdir -p "$FUZZ_KEEP_CORPUS/$t" && cp "$TMP/corpus/$t/"* "$FUZZ_KEEP_CORPUS/$t/" 2>/dev/null
  fi
  rows+=("$t ${execs:-?} ${rate:-?} ${cov:-?} ${ft:-?} $corp $verdict")
done

echo
echo "==> fuzz summary (${secs}s per target)"
printf '  %-14s %12s %10s %6s %7s %7s  %s\n' target execs execs/s cov ft corpus result
for r in "${rows[@]}"; do
  # shellcheck disable=SC2086
  printf '  %-14s %12s %10s %6s %7s %7s  %s\n' $r
done
echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ]

#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/fuzz_*.cpp) with clang in build-fuzz, replays every
# saved finding in tests/fuzz/crashes/<target>/ as a regression, then fuzzes each target on its
# seed corpus for SECONDS (default 30). New corpus entries go to a temporary folder, never into
# the repository; new findings are left in build-fuzz/fuzz-artifacts/<target>/ and fail the run.
# Usage: scripts/fuzz.sh [SECONDS]
#   HEARTH_FUZZ_TARGETS="jinja config"  only these targets (default: all)
#   HEARTH_FUZZ_JOBS=N                  ninja -j N (default: ninja's)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}
build=build-fuzz

CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DHEARTH_FUZZ=ON -DHEARTH_TESTS=OFF -DHEARTH_VULKAN=OFF >/dev/null
ninja -C "$build" ${HEARTH_FUZZ_JOBS:+-j "$HEARTH_FUZZ_JOBS"} hearth_fuzz

targets=${HEARTH_FUZZ_TARGETS:-$(cd tests/fuzz && ls fuzz_*.cpp | sed 's/^fuzz_//; s/\.cpp$//')}
# Findings abort (UBSan included) so libFuzzer reports them; leaks count too.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
limits=(-timeout=10 -rss_limit_mb=2048)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=()

# Every input that once crashed, hung or ran out of memory must now pass.
for t in $targets; do
  dir=tests/fuzz/crashes/$t
  [ -d "$dir" ] || continue
  files=("$dir"/*)
  [ -e "${files[0]}" ] || continue
  for f in "${files[@]}"; do
    if ! "$build/fuzz/fuzz_$t" "${limits[@]}" "$f" >"$tmp/replay.log" 2>&1; then
      echo "fuzz: $t: saved finding $f still fails:"
      grep -E "ERROR|SUMMARY|invariant|#[0-3] " "$tmp/replay.log" | head -12 | sed 's/^/  /'
      failed+=("$f")
    fi
  done
  echo "fuzz: $t: replayed ${#files[@]} saved finding(s)"
done

# The dictionary of tokens the mutator splices in (tests/fuzz/dicts/), by what the input is.
dict_for() {
  case $1 in
    jinja) echo tests/fuzz/dicts/jinja.dict ;;
    tokenizer_encode | tokenizer_decode) ;;
    *) echo tests/fuzz/dicts/json.dict ;;
  esac
}

for t in $targets; do
  mkdir -p "$tmp/$t" "$build/fuzz-artifacts/$t"
  log=$tmp/$t.log
  dict=$(dict_for "$t")
  if "$build/fuzz/fuzz_$t" "${limits[@]}" ${dict:+-dict="$dict"} -max_total_time="$secs" -print_final_stats=1 \
    -artifact_prefix="$build/fuzz-artifacts/$t/" "$tmp/$t" "tests/fuzz/corpus/$t" >"$log" 2>&1; then
    stats=$(grep -E "^#[0-9]+.*(DONE|pulse)" "$log" | tail -1 |
      sed -E 's/^#([0-9]+)[^c]*(cov:.*)/\1 runs, \2/' || true)
    echo "fuzz: $t: ok, $stats"
  else
    echo "fuzz: $t: FAILED; the input is in $build/fuzz-artifacts/$t/:"
    grep -E "ERROR|SUMMARY|invariant|Test unit written|#[0-3] " "$log" | head -15 | sed 's/^/  /'
    failed+=("$t")
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failed: ${failed[*]}"
  echo "fuzz: keep a new finding as a regression in tests/fuzz/crashes/<target>/ once fixed"
  exit 1
fi

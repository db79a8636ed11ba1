#!/usr/bin/env bash
# Runs desktop-chat under a virtual X server on a small model: the app loads it, sends a prompt
# through its test hook, prints the streamed reply and saves a screenshot of its own window. Passes
# when a non-empty reply was streamed, the main loop never stalled for long during generation, and
# the screenshot exists.
# Usage: xvfb_test.sh DESKTOP_CHAT_BINARY MODEL_DIR SCREENSHOT.png
set -euo pipefail
app=$1 model=$2 shot=$3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
rm -f "$shot"

# GSK's cairo renderer needs no GL, which a bare Xvfb may lack; GTK_A11Y=none avoids looking for an
# accessibility bus that a test machine does not run.
export GSK_RENDERER=cairo GTK_A11Y=none NO_AT_BRIDGE=1
# In sanitizer builds: GTK, GLib and fontconfig keep caches until exit by design, which LeakSanitizer
# would report; hearth's own freeing is checked by the C API tests and c-minimal instead.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export HEARTH_CHAT_TEST_PROMPT="Hello! Please introduce yourself."
export HEARTH_CHAT_TEST_SCREENSHOT=$shot
export HEARTH_CHAT_MAX_TOKENS=${HEARTH_CHAT_MAX_TOKENS:-40}
timeout 120 xvfb-run -a -s "-screen 0 1024x768x24" "$app" "$model" >"$out" 2>&1 || {
  echo "desktop-chat failed (exit $?):"; cat "$out"; exit 1; }
cat "$out"

reply=$(sed -n '/^REPLY-BEGIN$/,/^REPLY-END$/p' "$out" | sed '1d;$d')
if [ -z "${reply//[[:space:]]/}" ]; then echo "FAIL: no reply text"; exit 1; fi
grep -q '^status: HEARTH_OK$' "$out" || { echo "FAIL: generation did not succeed"; exit 1; }
gap=$(sed -n 's/^main loop max gap during generation: \([0-9]*\) ms$/\1/p' "$out")
# Generous: a shared CI machine can stall any process now and then; a UI thread that waited for the
# whole reply would show the full generation time instead.
if [ -z "$gap" ] || [ "$gap" -gt 1000 ]; then echo "FAIL: UI blocked for ${gap:-?} ms"; exit 1; fi
[ -s "$shot" ] || { echo "FAIL: no screenshot at $shot"; exit 1; }
if command -v identify >/dev/null; then identify "$shot"; fi
echo "PASS"

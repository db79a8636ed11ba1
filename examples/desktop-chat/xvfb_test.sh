#!/usr/bin/env bash
# Runs desktop-chat under a virtual X server on a small model: the app loads it, sends a prompt
# through its test hook, prints the streamed reply, then (HEARTH_CHAT_TEST_BAD_MODEL) opens a
# folder that fails to load, sends a second prompt, presses New chat, presses Stop during a third
# reply, and saves a screenshot of its own window. Passes when a non-empty reply was streamed, the
# main loop never stalled for long during generation, the failed load left the model and the
# conversation in place and the second prompt was answered, New chat left only the system prompt
# and an empty view, Stop cancelled the reply and gave the keyboard focus back to the entry, and
# the screenshot exists.
# Usage: xvfb_test.sh DESKTOP_CHAT_BINARY MODEL_DIR SCREENSHOT.png
set -euo pipefail
app=$1 model=$2 shot=$3
out=$(mktemp)
# A folder that is no model: a config.json that does not parse, and nothing else.
bad=$(mktemp -d)
echo 'not json' >"$bad/config.json"
trap 'rm -f "$out"; rm -rf "$bad"' EXIT
rm -f "$shot"

# GSK's cairo renderer needs no GL, which a bare Xvfb may lack; GTK_A11Y=none avoids looking for an
# accessibility bus that a test machine does not run.
export GSK_RENDERER=cairo GTK_A11Y=none NO_AT_BRIDGE=1
# In sanitizer builds: GTK, GLib and fontconfig keep caches until exit by design, which LeakSanitizer
# would report; hearth's own freeing is checked by the C API tests and c-minimal instead.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export HEARTH_CHAT_TEST_PROMPT="Hello! Please introduce yourself."
export HEARTH_CHAT_TEST_SCREENSHOT=$shot
export HEARTH_CHAT_TEST_BAD_MODEL=$bad
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
# The bad folder: a load error shown, the same model and all 3 messages (system, user, assistant)
# still there, and the next prompt answered on top of them (5 messages).
grep -q '^bad folder: load failed: .' "$out" || { echo "FAIL: the bad folder did not fail to load"; exit 1; }
grep -q '^bad folder: model kept: yes, messages: 3$' "$out" ||
  { echo "FAIL: a failed load lost the model or the conversation"; exit 1; }
grep -Eq '^second reply: status HEARTH_OK, new tokens [1-9][0-9]*, messages 5$' "$out" ||
  { echo "FAIL: no second reply after the failed load"; exit 1; }
grep -q '^new chat: messages 1, system prompt only: yes, view chars 0$' "$out" ||
  { echo "FAIL: New chat did not reset the session and the view"; exit 1; }
grep -q '^stop: finish cancelled, focus on entry: yes$' "$out" ||
  { echo "FAIL: Stop did not cancel the reply or return the focus to the entry"; exit 1; }
[ -s "$shot" ] || { echo "FAIL: no screenshot at $shot"; exit 1; }
if command -v identify >/dev/null; then identify "$shot"; fi
echo "PASS"

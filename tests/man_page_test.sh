#!/usr/bin/env bash
# Checks the generated man page and the bash completion against the CLI they are made from.
# The page: it exists, has a subsection (.SS) for every command `hearth --help` lists, and, where
# groff is installed, renders without a single warning (groff -ww, as man --warnings does). The
# completion: it parses (bash -n), and completing "hearth ru" offers run, "hearth run --mo" offers
# --model, and "hearth run --model DIR/" offers the folders in DIR.
# Usage: man_page_test.sh HEARTH_BINARY HEARTH_1 COMPLETION_SCRIPT
set -euo pipefail
hearth=$1 page=$2 completion=$3
fail() { echo "FAIL: $*"; exit 1; }

# ---- the man page ----
[ -s "$page" ] || fail "no man page at $page"
help=$("$hearth" --help) || fail "$hearth --help failed"
commands=$(awk '
  /^commands:[ \t]*$/ { list = 1; next }
  list && /^[ \t]*$/ { exit }
  list && /^  [a-z]/ { print $1 }' <<<"$help")
n=$(echo "$commands" | grep -c . || true)
[ "$n" -ge 5 ] || fail "only $n commands in hearth --help: $commands"
for c in $commands; do
  grep -qxF ".SS ${c//-/\\-}" "$page" || fail "no section for '$c' in $page"
done
echo "man page: a section for each of the $n commands"
for section in NAME SYNOPSIS DESCRIPTION COMMANDS; do
  grep -qx "\.SH $section" "$page" || fail "no $section section in $page"
done

# -k runs preconv first, as man does: the help text may hold UTF-8 (the page says so in its first
# line), which groff alone would read as Latin-1.
if command -v groff >/dev/null; then
  warnings=$(groff -k -man -Tutf8 -ww -z "$page" 2>&1) || fail "groff failed: $warnings"
  [ -z "$warnings" ] || fail "groff warns about $page:"$'\n'"$warnings"
  rendered=$(groff -k -man -Tutf8 "$page" 2>/dev/null | sed 's/.\x08//g')
  grep -q -- '--model' <<<"$rendered" || fail "the rendered page has no --model"
  echo "man page: renders without warnings"
else
  echo "SKIP: groff is not installed, so the page was not rendered"
fi

# ---- the completion ----
bash -n "$completion" || fail "$completion does not parse"
# shellcheck source=/dev/null
source "$completion"
complete_words() { # the words of a command line, the last being completed; prints COMPREPLY
  COMP_WORDS=("$@")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMP_LINE="${COMP_WORDS[*]}"
  COMP_POINT=${#COMP_LINE}
  COMPREPLY=()
  _hearth
  printf '%s\n' "${COMPREPLY[@]}"
}
got=$(complete_words "$hearth" ru)
grep -qx run <<<"$got" || fail "'hearth ru' completes to: $got"
got=$(complete_words "$hearth" run --mo)
grep -qx -- --model <<<"$got" || fail "'hearth run --mo' completes to: $got"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/qwen3-tiny"
touch "$dir/notes.txt"
got=$(complete_words "$hearth" run --model "$dir/")
[ "$got" = "$dir/qwen3-tiny" ] || fail "'hearth run --model $dir/' completes to: $got"
echo "completion: commands, options and folders"
echo PASS

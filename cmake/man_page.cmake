# Writes the hearth(1) man page from the built CLI's own help, so the page never drifts from it:
#   cmake -DHEARTH=path/to/hearth -DOUT=hearth.1 -DVERSION=0.1.0 [-DEMULATOR=...] -P man_page.cmake
# `hearth --help` gives the commands (the lines under "commands:", each "  NAME  summary", the
# summary possibly continued on lines indented deeper, up to a blank line) and whatever follows
# them (the NOTES section); `hearth COMMAND --help` gives each command's subsection.
# A command whose own --help fails gets its lines from the top-level help instead, so the page
# still builds while a command has no --help of its own.
cmake_minimum_required(VERSION 3.22)
foreach(v HEARTH OUT VERSION)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "man_page.cmake: -D${v}=... is required")
  endif()
endforeach()
# A sanitizer build's CLI would report GLib-style exit-time leaks as a failure of --help.
set(ENV{ASAN_OPTIONS} "detect_leaks=0")

# CMake lists split at ';' except inside [...], which help text is full of: such characters are
# swapped for control characters while the text is a list of lines, and swapped back after.
string(ASCII 1 _semi)
string(ASCII 2 _lbr)
string(ASCII 3 _rbr)
function(_to_lines text out)
  string(REPLACE ";" "${_semi}" text "${text}")
  string(REPLACE "[" "${_lbr}" text "${text}")
  string(REPLACE "]" "${_rbr}" text "${text}")
  string(REPLACE "\r" "" text "${text}")
  string(REGEX REPLACE "\n$" "" text "${text}")
  string(REPLACE "\n" ";" text "${text}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()
function(_from_lines lines out)
  string(REPLACE ";" "\n" text "${lines}")
  string(REPLACE "${_semi}" ";" text "${text}")
  string(REPLACE "${_lbr}" "[" text "${text}")
  string(REPLACE "${_rbr}" "]" text "${text}")
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

# Text as roff sees it: a backslash is roff's escape character (\e prints one), '-' is a hyphen
# to troff (\- is the minus an option needs, so the page can be copied from), and a line starting
# with '.' or '\'' would be a request (\& in front makes it text).
function(_roff_escape text out)
  string(REPLACE "\\" "\\e" text "${text}")
  string(REPLACE "-" "\\-" text "${text}")
  # (CMake's REGEX REPLACE tries ^ again where each match ended, so lines are found by "\n".)
  string(REGEX REPLACE "\n([.'])" "\n\\\\&\\1" text "\n${text}")
  string(SUBSTRING "${text}" 1 -1 text)
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

function(_run out_text out_ok)
  execute_process(COMMAND ${EMULATOR} "${HEARTH}" ${ARGN}
    INPUT_FILE /dev/null OUTPUT_VARIABLE text ERROR_QUIET RESULT_VARIABLE rc TIMEOUT 60)
  if(rc STREQUAL "0" AND text MATCHES "[^ \t\n]")
    set(${out_ok} TRUE PARENT_SCOPE)
  else()
    set(${out_ok} FALSE PARENT_SCOPE)
  endif()
  set(${out_text} "${text}" PARENT_SCOPE)
endfunction()

_run(top ok --help)
if(NOT ok)
  message(FATAL_ERROR "man_page.cmake: `${HEARTH} --help` failed")
endif()
_run(version_text ok --version)
set(version "${VERSION}")
if(ok AND version_text MATCHES "([0-9]+\\.[0-9]+\\.[0-9]+[^ \t\n]*)")
  set(version "${CMAKE_MATCH_1}")
endif()

# Split the top-level help: the lines before "commands:" (the first is "hearth: what it is"),
# each command's block of lines, and the rest.
_to_lines("${top}" lines)
set(state before)
set(tagline "")
set(commands "")
set(rest "")
set(current "")
foreach(line IN LISTS lines)
  if(state STREQUAL "before")
    if(line MATCHES "^commands:[ \t]*$")
      set(state commands)
    elseif(tagline STREQUAL "" AND line MATCHES "^hearth(:| -| --| —| –)[ \t]+(.+)$")
      set(tagline "${CMAKE_MATCH_2}") # "hearth: what it is", or with a dash
    endif()
  elseif(state STREQUAL "commands")
    if(line MATCHES "^[ \t]*$")
      set(state rest)
    elseif(line MATCHES "^  ([a-z][a-z0-9-]*)([ \t]|$)")
      set(current "${CMAKE_MATCH_1}")
      list(APPEND commands "${current}")
      string(REGEX MATCH "^  [a-z0-9-]+[ \t]*" head "${line}")
      string(LENGTH "${head}" n)
      string(SUBSTRING "${line}" ${n} -1 summary_${current})
      string(SUBSTRING "${line}" 2 -1 block) # the 2-space indent, and no more
      set(block_${current} "${block}")
    elseif(line MATCHES "^   +(.*)$" AND NOT current STREQUAL "")
      string(APPEND summary_${current} " ${CMAKE_MATCH_1}")
      string(SUBSTRING "${line}" 2 -1 block)
      list(APPEND block_${current} "${block}")
    else()
      set(state rest) # a heading of its own: the commands have ended
      list(APPEND rest "${line}")
    endif()
  else()
    list(APPEND rest "${line}")
  endif()
endforeach()
if(NOT commands)
  message(FATAL_ERROR "man_page.cmake: no \"commands:\" list in `${HEARTH} --help`")
endif()
if(tagline STREQUAL "")
  set(tagline "inference engine for Qwen3 language models")
endif()
_from_lines("${tagline}" tagline)
_roff_escape("${tagline}" tagline_roff)

string(CONCAT page
  ".\\\" -*- coding: utf-8 -*-\n"
  ".\\\" Written by cmake/man_page.cmake from `hearth --help` and each `hearth COMMAND --help`.\n"
  ".TH HEARTH 1 \"\" \"hearth ${version}\" \"User Commands\"\n"
  ".SH NAME\n"
  "hearth \\- ${tagline_roff}\n"
  ".SH SYNOPSIS\n"
  ".B hearth\n.I command\n.RI [ options ]\n.br\n"
  ".B hearth\n.I command\n.B \\-\\-help\n.br\n"
  ".B hearth \\-\\-help\n.br\n"
  ".B hearth \\-\\-version\n"
  ".SH DESCRIPTION\n"
  ".B hearth\n"
  "runs Qwen3 language models from Hugging Face checkpoint folders (config.json, tokenizer.json,\n"
  "*.safetensors) or folders written by\n.BR \"hearth quantize\" .\n"
  "Each command has a subsection below with the text of its\n"
  ".B \\-\\-help\n"
  "option. Failures print one line starting with \"error:\" and exit with a nonzero status.\n"
  ".SH COMMANDS\n")

foreach(cmd IN LISTS commands)
  string(REPLACE "-" "\\-" cmd_roff "${cmd}")
  string(APPEND page ".SS ${cmd_roff}\n")
  _run(help ok ${cmd} --help)
  if(ok)
    _from_lines("${summary_${cmd}}" summary)
    if(summary MATCHES "[^ \t]")
      _roff_escape("${summary}" summary)
      string(APPEND page "${summary}\n.PP\n")
    endif()
  else()
    _from_lines("${block_${cmd}}" help)
  endif()
  string(REGEX REPLACE "\n+$" "" help "${help}")
  _roff_escape("${help}" help)
  string(APPEND page ".nf\n${help}\n.fi\n")
endforeach()

_from_lines("${rest}" rest)
string(REGEX REPLACE "^\n+" "" rest "${rest}")
string(REGEX REPLACE "\n+$" "" rest "${rest}")
if(rest MATCHES "[^ \t\n]")
  _roff_escape("${rest}" rest)
  string(APPEND page ".SH NOTES\nThe rest of\n.BR \"hearth \\-\\-help\" :\n.PP\n.nf\n${rest}\n.fi\n")
endif()

string(APPEND page
  ".SH SEE ALSO\n"
  "README.md in the hearth sources, and\n"
  ".B hearth\n"
  ".I command\n"
  ".B \\-\\-help\n"
  "for the current text of each command's help.\n")

file(WRITE "${OUT}" "${page}")

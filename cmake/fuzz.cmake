# libFuzzer targets for every parser of untrusted input (tests/fuzz/, issue 20), built with
# -DHEARTH_FUZZ=ON. Included from the top-level CMakeLists.txt only then, after hearth_obj exists:
# the library's objects are compiled with the fuzzer's coverage instrumentation and the sanitizers
# too, or libFuzzer would be blind inside the very code it is meant to explore.
# Usage: CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DHEARTH_FUZZ=ON -DHEARTH_TESTS=OFF
#        ninja -C build-fuzz hearth_fuzz        (scripts/fuzz.sh does both, then runs them)
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "HEARTH_FUZZ needs clang (libFuzzer ships with it), but the C++ compiler is "
    "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER}. Configure a fresh build folder with "
    "CC=clang CXX=clang++ (scripts/fuzz.sh does).")
endif()
if(HEARTH_SANITIZE)
  message(FATAL_ERROR "HEARTH_FUZZ already builds with ASan+UBSan; leave HEARTH_SANITIZE off")
endif()

# clang before 16 rejects __builtin_cpu_supports("f16c") and ("avxvnni"), which CPU detection
# asks for; a shim reads those two from CPUID in this build alone.
if(CMAKE_CXX_COMPILER_VERSION VERSION_LESS 16)
  set_property(SOURCE ${CMAKE_SOURCE_DIR}/backends/cpu/cpu_features.cpp APPEND PROPERTY
    COMPILE_OPTIONS -include ${CMAKE_SOURCE_DIR}/tests/fuzz/clang14_cpu_supports.h)
endif()

# UBSan findings abort instead of printing and carrying on, so libFuzzer sees them as crashes.
set(HEARTH_FUZZ_SAN -fsanitize=address,undefined -fno-sanitize-recover=undefined
  -fno-omit-frame-pointer -g)
# PUBLIC: everything linking the objects (the CLI, the libraries, the fuzz targets) also links the
# sanitizer runtimes.
target_compile_options(hearth_obj PUBLIC -fsanitize=fuzzer-no-link ${HEARTH_FUZZ_SAN})
target_link_options(hearth_obj PUBLIC -fsanitize=address,undefined)

# Where the targets find the real Qwen3 tokenizer and the fixture checkpoints they load once.
set(HEARTH_FUZZ_SHARED "${CMAKE_SOURCE_DIR}/../shared" CACHE PATH
  "Folder holding qwen3-tokenizer/ and fixtures/ for the fuzz targets")

# One executable per tests/fuzz/fuzz_NAME.cpp; the tools/ sources a target needs are named here.
set(HEARTH_FUZZ_TOOL_SOURCES_jsonl tools/text.cpp tools/args.cpp tools/jsonl_lines.cpp)
set(HEARTH_FUZZ_TOOL_SOURCES_serve_request tools/serve_api.cpp)
file(GLOB HEARTH_FUZZ_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/fuzz/fuzz_*.cpp)
set(HEARTH_FUZZ_TARGETS "")
foreach(src ${HEARTH_FUZZ_SOURCES})
  get_filename_component(name ${src} NAME_WE)  # fuzz_NAME
  string(REGEX REPLACE "^fuzz_" "" short ${name})
  add_executable(${name} ${src} ${HEARTH_FUZZ_TOOL_SOURCES_${short}})
  target_compile_options(${name} PRIVATE -fsanitize=fuzzer ${HEARTH_FUZZ_SAN} ${HEARTH_WARNINGS})
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  target_link_libraries(${name} PRIVATE hearth_obj)
  target_compile_definitions(${name} PRIVATE HEARTH_SHARED_DIR="${HEARTH_FUZZ_SHARED}")
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
  list(APPEND HEARTH_FUZZ_TARGETS ${name})
endforeach()
# `ninja hearth_fuzz` builds the targets alone, not the CLI and libraries beside them.
add_custom_target(hearth_fuzz DEPENDS ${HEARTH_FUZZ_TARGETS})

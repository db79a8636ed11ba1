#!/bin/sh
# The software prefetches the CPU backend asks for are in its objects. GCC deletes the calls of a
# function that does nothing but __builtin_prefetch when it is not inlined (DEVELOPERS.md, Rules),
# and nothing else would notice: every result stays the same, only slower.
# Usage: prefetch_test.sh OBJECT... (the hearth_obj objects of an x86-64 build)
set -eu
command -v objdump >/dev/null || { echo "prefetch check skipped: no objdump"; exit 0; }
objdump -f "$1" | grep -q 'x86-64' || { echo "prefetch check skipped: not an x86-64 build"; exit 0; }
# Sources that prefetch, in their own code or their kernels' headers; each object must keep at
# least one prefetch instruction (a deleted helper took every one of its file's with it).
want="exec_screened_head screen_q8_avx512 screen_q8_avx2 matmul_q8_split_avx512 attention_avx512
attention_avx2 vecops_avx512 matmul_q4_avx512 matmul_q8_avx512 matmul_bf16_avx512"
fail=0
for name in $want; do
  obj=""
  for o in "$@"; do
    case "$o" in */"$name".cpp.o | */"$name".cpp.obj) obj=$o ;; esac
  done
  if [ -z "$obj" ]; then
    echo "FAIL: no object for $name.cpp among the arguments"
    fail=1
    continue
  fi
  n=$(objdump -d "$obj" | grep -c 'prefetcht[0-2]' || true)
  if [ "$n" -eq 0 ]; then
    echo "FAIL: $name.cpp asks for prefetches but its object has none"
    fail=1
  else
    echo "ok: $name.cpp, $n prefetch instructions"
  fi
done
exit $fail

# Writes OUT, a C++ file defining hearth::serve::kChatPage as the bytes of IN (the chat page that
# `hearth serve` answers GET / with), so the binary needs no files beside it.
file(READ "${IN}" content)
string(FIND "${content}" ")hearthpage\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw-string delimiter )hearthpage\"")
endif()
file(WRITE "${OUT}.tmp" "// Generated from tools/serve_page.html by cmake/embed_page.cmake.\n"
  "namespace hearth::serve {\nextern const char* const kChatPage;\n"
  "const char* const kChatPage = R\"hearthpage(${content})hearthpage\";\n}  // namespace hearth::serve\n")
file(RENAME "${OUT}.tmp" "${OUT}")

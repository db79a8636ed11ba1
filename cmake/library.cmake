# The embeddable library: libhearth.so (a versioned SONAME, exporting the C API of include/hearth.h
# and nothing else) and libhearth.a, both from the objects the CLI is built from; `cmake --install`
# rules with pkg-config and find_package(hearth) files; the strict-C99 API test; the examples.
# Included at the end of the top-level CMakeLists.txt, so every dependency of hearth_obj is known.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# hearth.h's version macros, the SONAME and hearth_version() must agree.
file(STRINGS ${CMAKE_SOURCE_DIR}/include/hearth.h _hearth_ver_lines
  REGEX "^#define HEARTH_VERSION_(MAJOR|MINOR|PATCH) ")
set(_hearth_header_version "")
foreach(part MAJOR MINOR PATCH)
  string(REGEX MATCH "HEARTH_VERSION_${part} ([0-9]+)" _m "${_hearth_ver_lines}")
  list(APPEND _hearth_header_version ${CMAKE_MATCH_1})
endforeach()
string(REPLACE ";" "." _hearth_header_version "${_hearth_header_version}")
if(NOT _hearth_header_version STREQUAL PROJECT_VERSION)
  message(FATAL_ERROR "include/hearth.h says version ${_hearth_header_version} but the project "
    "is ${PROJECT_VERSION}; update HEARTH_VERSION_* in the header")
endif()

# Linking the object library adds its objects and carries its dependencies along.
add_library(hearth_shared SHARED api/hearth.map)
target_link_libraries(hearth_shared PRIVATE hearth_obj)
target_include_directories(hearth_shared INTERFACE $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/include>)
target_link_options(hearth_shared PRIVATE
  "LINKER:--version-script=${CMAKE_SOURCE_DIR}/api/hearth.map" "LINKER:--no-undefined")
set_target_properties(hearth_shared PROPERTIES
  OUTPUT_NAME hearth
  VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR}
  LINK_DEPENDS ${CMAKE_SOURCE_DIR}/api/hearth.map
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})

add_library(hearth_static STATIC api/hearth.map)
target_link_libraries(hearth_static PRIVATE hearth_obj)
target_include_directories(hearth_static INTERFACE $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/include>)
set_target_properties(hearth_static PROPERTIES
  OUTPUT_NAME hearth
  ARCHIVE_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})

# What a program linking libhearth.a also needs, for hearth.pc (Requires.private and
# Libs.private) and hearth-config.cmake (hearth::hearth_static), read from hearth_obj's link
# libraries so a dependency added there is packaged too.
set(_pc_requires "")
set(_pc_libs "")
set(_cfg_libs "")
get_target_property(_hearth_deps hearth_obj LINK_LIBRARIES)
foreach(dep IN LISTS _hearth_deps)
  if(dep STREQUAL "simdjson::simdjson")
    list(APPEND _pc_requires simdjson)
    list(APPEND _cfg_libs simdjson)
  elseif(dep STREQUAL "PkgConfig::PCRE2")
    list(APPEND _pc_requires libpcre2-8)
    list(APPEND _cfg_libs pcre2-8)
  elseif(dep STREQUAL "PkgConfig::UTF8PROC")
    list(APPEND _pc_requires libutf8proc)
    list(APPEND _cfg_libs utf8proc)
  elseif(dep STREQUAL "PkgConfig::OPENBLAS")
    list(APPEND _pc_requires openblas)
    list(APPEND _cfg_libs openblas)
  elseif(dep STREQUAL "DNNL::dnnl")
    list(APPEND _pc_libs -ldnnl)
    list(APPEND _cfg_libs dnnl)
  elseif(dep STREQUAL "Threads::Threads")
    list(APPEND _pc_libs -pthread)
    list(APPEND _cfg_libs Threads::Threads)
  elseif(dep MATCHES "/lib([^/]+)\\.(so|a)(\\.[0-9.]*)?$")
    list(APPEND _pc_libs -l${CMAKE_MATCH_1})
    list(APPEND _cfg_libs ${CMAKE_MATCH_1})
  elseif(dep MATCHES "^-")
    list(APPEND _pc_libs ${dep})
    list(APPEND _cfg_libs ${dep})
  else()
    message(WARNING "hearth.pc: do not know how to package the dependency '${dep}' for static "
      "linking; add it to cmake/library.cmake")
  endif()
endforeach()
list(APPEND _pc_libs -lstdc++ -lm)
list(REMOVE_DUPLICATES _pc_requires)
list(REMOVE_DUPLICATES _pc_libs)
list(REMOVE_DUPLICATES _cfg_libs)
string(REPLACE ";" " " HEARTH_PC_REQUIRES_PRIVATE "${_pc_requires}")
string(REPLACE ";" " " HEARTH_PC_LIBS_PRIVATE "${_pc_libs}")
set(HEARTH_CONFIG_STATIC_LIBS "${_cfg_libs}")

# Both files find the install prefix relative to their own location, so `cmake --install --prefix`
# anywhere (or moving the tree) keeps them valid.
file(RELATIVE_PATH HEARTH_PC_PREFIX_REL "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
file(RELATIVE_PATH HEARTH_CONFIG_PREFIX_REL "/p/${CMAKE_INSTALL_LIBDIR}/cmake/hearth" "/p")
string(REGEX REPLACE "/$" "" HEARTH_PC_PREFIX_REL "${HEARTH_PC_PREFIX_REL}")
string(REGEX REPLACE "/$" "" HEARTH_CONFIG_PREFIX_REL "${HEARTH_CONFIG_PREFIX_REL}")
configure_file(cmake/hearth.pc.in ${CMAKE_BINARY_DIR}/packaging/hearth.pc @ONLY)
configure_file(cmake/hearth-config.cmake.in ${CMAKE_BINARY_DIR}/packaging/hearth-config.cmake
  @ONLY)
# 0.x releases share SONAME libhearth.so.0, so any 0.y satisfies a request for 0.x.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/packaging/hearth-config-version.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)

install(TARGETS hearth_shared hearth_static
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS hearth RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES include/hearth.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${CMAKE_BINARY_DIR}/packaging/hearth.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
install(FILES ${CMAKE_BINARY_DIR}/packaging/hearth-config.cmake
  ${CMAKE_BINARY_DIR}/packaging/hearth-config-version.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/hearth)

# Examples, built here against the in-tree shared library exactly as they would be against the
# installed one.
add_executable(hearth_c_minimal examples/c-minimal/main.c)
target_link_libraries(hearth_c_minimal PRIVATE hearth_shared Threads::Threads)
target_compile_options(hearth_c_minimal PRIVATE -std=c99 -pedantic ${HEARTH_WARNINGS})
set_target_properties(hearth_c_minimal PROPERTIES OUTPUT_NAME c-minimal
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/examples)

# The desktop chat needs GTK 4; the core build does not.
pkg_check_modules(GTK4 QUIET IMPORTED_TARGET gtk4)
if(GTK4_FOUND)
  add_executable(hearth_desktop_chat examples/desktop-chat/main.c)
  target_link_libraries(hearth_desktop_chat PRIVATE hearth_shared PkgConfig::GTK4)
  target_compile_options(hearth_desktop_chat PRIVATE ${HEARTH_WARNINGS})
  set_target_properties(hearth_desktop_chat PROPERTIES OUTPUT_NAME desktop-chat
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/examples)
endif()

if(HEARTH_TESTS)
  # The API from C, as strict C99 with every warning an error, linked against the shared library.
  add_executable(hearth_capi_c99 tests/capi_c99.c)
  target_link_libraries(hearth_capi_c99 PRIVATE hearth_shared)
  target_compile_options(hearth_capi_c99 PRIVATE -std=c99 -pedantic -Wall -Wextra -Werror)
  target_compile_definitions(hearth_capi_c99 PRIVATE
    HEARTH_SHARED_DIR="${CMAKE_SOURCE_DIR}/../shared")
  add_test(NAME capi_c99 COMMAND hearth_capi_c99)

  # test_capi.cpp inspects the built libraries and installs the package to a temporary prefix.
  add_dependencies(hearth_tests hearth_shared hearth_static)
  target_compile_definitions(hearth_tests PRIVATE
    HEARTH_SHARED_LIBRARY="$<TARGET_FILE:hearth_shared>"
    HEARTH_BUILD_DIR="${CMAKE_BINARY_DIR}"
    HEARTH_C_COMPILER="${CMAKE_C_COMPILER}"
    HEARTH_CMAKE_COMMAND="${CMAKE_COMMAND}"
    HEARTH_SANITIZED=$<BOOL:${HEARTH_SANITIZE}>)
  if(GTK4_FOUND)
    find_program(HEARTH_XVFB_RUN xvfb-run)
    if(HEARTH_XVFB_RUN)
      add_test(NAME desktop_chat COMMAND ${CMAKE_SOURCE_DIR}/examples/desktop-chat/xvfb_test.sh
        $<TARGET_FILE:hearth_desktop_chat> ${CMAKE_SOURCE_DIR}/../shared/fixtures/models/tiny-tied-bf16
        ${CMAKE_BINARY_DIR}/desktop-chat-screenshot.png)
    endif()
  endif()
endif()

# The embeddable library: libhearth.so (a versioned SONAME, exporting the C API of include/hearth.h
# and nothing else) and libhearth.a, both from the objects the CLI is built from; `cmake --install`
# rules with pkg-config and find_package(hearth) files, the man page and the bash completion; the
# strict-C99 API test; the examples.
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

# What a program linking libhearth.a also needs, for hearth.pc (Libs.private) and
# hearth-config.cmake (hearth::hearth_static), read from hearth_obj's link libraries so a
# dependency added there is packaged too. hearth.pc names them as -L/-l flags rather than in
# Requires.private: pkg-config adds a required package's Cflags to `--cflags hearth` even when it
# is private, and none of their headers are hearth.h's.
set(_pc_libs "")
set(_cfg_libs "")
set(_pc_system_dirs ${CMAKE_C_IMPLICIT_LINK_DIRECTORIES} ${CMAKE_CXX_IMPLICIT_LINK_DIRECTORIES})
# Appends a pkg-config module's `--libs --static` flags (as pkg_check_modules read them) to
# _pc_libs, less the -L of directories the linker searches anyway.
macro(_hearth_pc_module prefix)
  foreach(flag IN LISTS ${prefix}_STATIC_LDFLAGS)
    string(REGEX REPLACE "/$" "" _dir "${flag}")
    string(REGEX REPLACE "^-L" "" _dir "${_dir}")
    if(NOT (flag MATCHES "^-L" AND _dir IN_LIST _pc_system_dirs))
      list(APPEND _pc_libs ${flag})
    endif()
  endforeach()
endmacro()
# Appends -L/-l flags for a library file (the -L only outside the linker's own directories).
macro(_hearth_pc_file path)
  get_filename_component(_dir "${path}" DIRECTORY)
  get_filename_component(_name "${path}" NAME)
  string(REGEX REPLACE "^lib([^/]+)\\.(so|a)(\\.[0-9.]*)?$" "\\1" _name "${_name}")
  if(NOT _dir IN_LIST _pc_system_dirs)
    list(APPEND _pc_libs -L${_dir})
  endif()
  list(APPEND _pc_libs -l${_name})
endmacro()
# An imported CMake target's library file, or the fallback name when it has none (an INTERFACE
# target, a build type it lacks).
macro(_hearth_pc_target target fallback)
  get_target_property(_type ${target} TYPE)
  set(_loc "")
  if(NOT _type STREQUAL "INTERFACE_LIBRARY")
    get_target_property(_loc ${target} LOCATION)
  endif()
  if(_loc AND _loc MATCHES "/lib[^/]+\\.(so|a)(\\.[0-9.]*)?$")
    _hearth_pc_file("${_loc}")
  else()
    list(APPEND _pc_libs -l${fallback})
  endif()
endmacro()
get_target_property(_hearth_deps hearth_obj LINK_LIBRARIES)
foreach(dep IN LISTS _hearth_deps)
  if(dep STREQUAL "simdjson::simdjson")
    _hearth_pc_target(simdjson::simdjson simdjson)
    list(APPEND _cfg_libs simdjson)
  elseif(dep STREQUAL "PkgConfig::PCRE2")
    _hearth_pc_module(PCRE2)
    list(APPEND _cfg_libs pcre2-8)
  elseif(dep STREQUAL "PkgConfig::UTF8PROC")
    _hearth_pc_module(UTF8PROC)
    list(APPEND _cfg_libs utf8proc)
  elseif(dep STREQUAL "PkgConfig::OPENBLAS")
    _hearth_pc_module(OPENBLAS)
    list(APPEND _cfg_libs openblas)
  elseif(dep STREQUAL "DNNL::dnnl")
    _hearth_pc_target(DNNL::dnnl dnnl)
    list(APPEND _cfg_libs dnnl)
  elseif(dep STREQUAL "Vulkan::Vulkan")
    _hearth_pc_target(Vulkan::Vulkan vulkan)
    list(APPEND _cfg_libs vulkan)
  elseif(dep STREQUAL "CUDA::cudart")
    string(REPLACE "CUDA::" "" _cuda_lib "${dep}")
    _hearth_pc_target(${dep} ${_cuda_lib})
    get_target_property(_cuda_loc ${dep} LOCATION)
    list(APPEND _cfg_libs ${_cuda_loc})
  elseif(dep STREQUAL "dl")  # dlopen, for cuBLAS (backends/cuda/cu_blas.h)
    list(APPEND _pc_libs -ldl)
    list(APPEND _cfg_libs dl)
  elseif(dep STREQUAL "Threads::Threads")
    list(APPEND _pc_libs -pthread)
    list(APPEND _cfg_libs Threads::Threads)
  elseif(dep MATCHES "/lib([^/]+)\\.(so|a)(\\.[0-9.]*)?$")
    list(APPEND _cfg_libs ${CMAKE_MATCH_1}) # before the macro's own matching replaces it
    _hearth_pc_file("${dep}")
  elseif(dep MATCHES "^-")
    list(APPEND _pc_libs ${dep})
    list(APPEND _cfg_libs ${dep})
  else()
    message(WARNING "hearth.pc: do not know how to package the dependency '${dep}' for static "
      "linking; add it to cmake/library.cmake")
  endif()
endforeach()
list(APPEND _pc_libs -lstdc++ -lm)
list(REMOVE_DUPLICATES _pc_libs)
list(REMOVE_DUPLICATES _cfg_libs)
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

# The man page, written from the built CLI's --help texts whenever the CLI is rebuilt (so it always
# describes the binary installed beside it), and the bash completion, which reads the same help at
# completion time. A cross build runs the CLI through its emulator.
set(HEARTH_MAN_PAGE ${CMAKE_BINARY_DIR}/hearth.1)
add_custom_command(OUTPUT ${HEARTH_MAN_PAGE}
  COMMAND ${CMAKE_COMMAND} -DHEARTH=$<TARGET_FILE:hearth> -DOUT=${HEARTH_MAN_PAGE}
    -DVERSION=${PROJECT_VERSION} "-DEMULATOR=${CMAKE_CROSSCOMPILING_EMULATOR}"
    -P ${CMAKE_SOURCE_DIR}/cmake/man_page.cmake
  DEPENDS hearth ${CMAKE_SOURCE_DIR}/cmake/man_page.cmake
  COMMENT "Writing hearth.1 from hearth --help")
add_custom_target(hearth_man ALL DEPENDS ${HEARTH_MAN_PAGE})
install(FILES ${HEARTH_MAN_PAGE} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
install(FILES tools/hearth.bash-completion
  DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions RENAME hearth)

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

  # test_capi.cpp inspects the built libraries and installs the package to a temporary prefix
  # (the man page included).
  add_dependencies(hearth_tests hearth_shared hearth_static hearth_man)
  target_compile_definitions(hearth_tests PRIVATE
    HEARTH_SHARED_LIBRARY="$<TARGET_FILE:hearth_shared>"
    HEARTH_BUILD_DIR="${CMAKE_BINARY_DIR}"
    HEARTH_C_COMPILER="${CMAKE_C_COMPILER}"
    HEARTH_CMAKE_COMMAND="${CMAKE_COMMAND}"
    HEARTH_SANITIZED=$<BOOL:${HEARTH_SANITIZE}>)
  # The man page has a section per command and renders cleanly; the completion completes.
  add_test(NAME man_page COMMAND ${CMAKE_SOURCE_DIR}/tests/man_page_test.sh
    $<TARGET_FILE:hearth> ${HEARTH_MAN_PAGE} ${CMAKE_SOURCE_DIR}/tools/hearth.bash-completion)

  if(GTK4_FOUND)
    find_program(HEARTH_XVFB_RUN xvfb-run)
    if(HEARTH_XVFB_RUN)
      add_test(NAME desktop_chat COMMAND ${CMAKE_SOURCE_DIR}/examples/desktop-chat/xvfb_test.sh
        $<TARGET_FILE:hearth_desktop_chat> ${CMAKE_SOURCE_DIR}/../shared/fixtures/models/tiny-tied-bf16
        ${CMAKE_BINARY_DIR}/desktop-chat-screenshot.png)
    endif()
  endif()
endif()

# The Vulkan backend (backends/vulkan/), built when the Vulkan headers, loader and glslc are found
# (Debian: libvulkan-dev, glslc; scripts/setup.sh installs them) unless -DHEARTH_VULKAN=OFF. Each
# shader in backends/vulkan/shaders/ is compiled to SPIR-V words that vk_kernels.cpp embeds; those
# that read 16-bit weights or KV caches also with -DHEARTH_STORAGE16 (NAME_s16), the variant for
# devices with 16-bit storage. matmul_dot*.comp use integer dot products through
# GL_EXT_spirv_intrinsics (glslang has no GLSL extension for SPV_KHR_integer_dot_product yet).
find_package(Vulkan QUIET)
find_program(HEARTH_GLSLC glslc)
if(HEARTH_VULKAN STREQUAL "AUTO")
  if(Vulkan_FOUND AND HEARTH_GLSLC)
    set(HEARTH_VULKAN ON)
  else()
    set(HEARTH_VULKAN OFF)
    message(STATUS "Vulkan backend off: needs libvulkan-dev and glslc (scripts/setup.sh)")
  endif()
elseif(HEARTH_VULKAN AND NOT (Vulkan_FOUND AND HEARTH_GLSLC))
  message(FATAL_ERROR "HEARTH_VULKAN=ON needs libvulkan-dev and glslc")
endif()

if(HEARTH_VULKAN)
  set(dir ${CMAKE_SOURCE_DIR}/backends/vulkan)
  file(GLOB HEARTH_VULKAN_SOURCES CONFIGURE_DEPENDS ${dir}/*.cpp)
  file(GLOB shaders CONFIGURE_DEPENDS ${dir}/shaders/*.comp)
  file(GLOB shader_includes CONFIGURE_DEPENDS ${dir}/shaders/*.glsl)
  set(spv_dir ${CMAKE_BINARY_DIR}/spirv)
  file(MAKE_DIRECTORY ${spv_dir})
  set(spv_outputs)
  set(storage16_shaders embed rms_norm matmul matmul_subgroup matmul_rows matmul_tiled kv_store
      attention attention_tiled)
  foreach(src ${shaders})
    get_filename_component(name ${src} NAME_WE)
    set(variants "${name}|")
    if(name IN_LIST storage16_shaders)
      list(APPEND variants "${name}_s16|-DHEARTH_STORAGE16")
    endif()
    foreach(v ${variants})
      string(REPLACE "|" ";" v ${v})
      list(GET v 0 out_name)
      list(LENGTH v n)
      set(defs)
      if(n GREATER 1)
        list(GET v 1 defs)
      endif()
      set(out ${spv_dir}/${out_name}.spv.inc)
      add_custom_command(OUTPUT ${out}
        COMMAND ${HEARTH_GLSLC} --target-env=vulkan1.2 -O -Werror -mfmt=num ${defs} -o ${out} ${src}
        DEPENDS ${src} ${shader_includes}
        COMMENT "Compiling shader ${out_name}")
      list(APPEND spv_outputs ${out})
    endforeach()
  endforeach()
  add_custom_target(hearth_spirv DEPENDS ${spv_outputs})
  target_sources(hearth_obj PRIVATE ${HEARTH_VULKAN_SOURCES})
  # Vulkan structs are written `VkXInfo x{VK_STRUCTURE_TYPE_X_INFO};`: the rest zero, on purpose.
  set_source_files_properties(${HEARTH_VULKAN_SOURCES} PROPERTIES
    COMPILE_OPTIONS -Wno-missing-field-initializers)
  add_dependencies(hearth_obj hearth_spirv)
  target_include_directories(hearth_obj PRIVATE ${spv_dir})
  target_link_libraries(hearth_obj PUBLIC Vulkan::Vulkan)
  target_compile_definitions(hearth_obj PUBLIC HEARTH_HAVE_VULKAN=1)
endif()

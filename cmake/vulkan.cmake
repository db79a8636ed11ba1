# The Vulkan backend (backends/vulkan/), built when the Vulkan headers, loader and glslc are found
# (Debian: libvulkan-dev, glslc; scripts/setup.sh installs them) unless -DHEARTH_VULKAN=OFF. Each
# shader in backends/vulkan/shaders/ is compiled to SPIR-V words that vk_kernels.cpp embeds.
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
  foreach(src ${shaders})
    get_filename_component(name ${src} NAME_WE)
    set(out ${spv_dir}/${name}.spv.inc)
    add_custom_command(OUTPUT ${out}
      COMMAND ${HEARTH_GLSLC} --target-env=vulkan1.2 -O -Werror -mfmt=num -o ${out} ${src}
      DEPENDS ${src} ${shader_includes}
      COMMENT "Compiling shader ${name}.comp")
    list(APPEND spv_outputs ${out})
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

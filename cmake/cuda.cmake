# The CUDA backend (backends/cuda/), built when nvcc is found (the toolkit under /usr/local/cuda on
# the project's machines) unless -DHEARTH_CUDA=OFF. No GPU is needed to build it: the kernels are
# compiled for the architectures listed in HEARTH_CUDA_ARCHITECTURES ('native' fails without a
# device), the host code links cudart and opens cuBLAS when a backend needs it, and a machine
# without a device reports the backend unavailable.
include(CheckLanguage)
if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
if(HEARTH_CUDA STREQUAL "AUTO" AND (HEARTH_SANITIZE OR HEARTH_FUZZ))
  # nvcc takes neither the sanitizers' nor libFuzzer's flags; those builds check the host code.
  set(HEARTH_CUDA OFF)
elseif(HEARTH_CUDA STREQUAL "AUTO")
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(HEARTH_CUDA ON)
  else()
    set(HEARTH_CUDA OFF)
    message(STATUS "CUDA backend off: nvcc not found (the CUDA toolkit, /usr/local/cuda)")
  endif()
endif()

if(HEARTH_CUDA)
  # Ampere (A100, RTX 30), Ada (RTX 40, L4), Hopper (H100, H200); PTX for Hopper runs on later
  # GPUs through the driver's JIT.
  set(HEARTH_CUDA_ARCHITECTURES "80-real;86-real;89-real;90" CACHE STRING
    "CUDA architectures the kernels are compiled for")
  set(CMAKE_CUDA_ARCHITECTURES ${HEARTH_CUDA_ARCHITECTURES})
  set(CMAKE_CUDA_HOST_COMPILER ${CMAKE_CXX_COMPILER})
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  find_package(CUDAToolkit REQUIRED)
  set(dir ${CMAKE_SOURCE_DIR}/backends/cuda)
  file(GLOB HEARTH_CUDA_SOURCES CONFIGURE_DEPENDS ${dir}/*.cpp ${dir}/*.cu)
  target_sources(hearth_obj PRIVATE ${HEARTH_CUDA_SOURCES})
  # hearth_obj was created before the language was enabled: it takes the architectures here.
  set_target_properties(hearth_obj PROPERTIES CUDA_ARCHITECTURES "${HEARTH_CUDA_ARCHITECTURES}")
  # nvcc's own warnings and the host compiler's, both errors under HEARTH_WERROR.
  set(cuda_warnings -Xcompiler=-Wall,-Wextra,-Wno-unused-parameter)
  if(HEARTH_WERROR)
    list(APPEND cuda_warnings -Werror=all-warnings -Xcompiler=-Werror)
  endif()
  target_compile_options(hearth_obj PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${cuda_warnings}>)
  # cuBLAS is opened at run time (backends/cuda/cu_blas.h), not linked: linked, it costs every
  # process ~215 MB and 0.35 s at start. Its headers come with cudart's include folder.
  target_link_libraries(hearth_obj PUBLIC CUDA::cudart ${CMAKE_DL_LIBS})
  set_source_files_properties(${dir}/cu_blas.cpp PROPERTIES
    COMPILE_DEFINITIONS HEARTH_CUBLAS_DIR="${CUDAToolkit_LIBRARY_DIR}")
  target_compile_definitions(hearth_obj PUBLIC HEARTH_HAVE_CUDA=1)
endif()

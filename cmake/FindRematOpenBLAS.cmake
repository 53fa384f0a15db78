# Finds OpenBLAS for remat (sets REMAT_OPENBLAS_LIBRARY). Used at build time and by
# rematConfig.cmake, so a consumer links the same library the build found.
#
# With OpenMP, the OpenMP build of OpenBLAS (Debian: libopenblas-openmp-dev) is preferred: it
# shares one thread pool with remat's own kernels. The pthreads build keeps its own threads
# spinning after each GEMM, which fight the OpenMP threads: on a 2-core machine a GPT step
# with 2 threads took 1.18 s with it against 0.39 s with the OpenMP build.
if(NOT REMAT_OPENBLAS_LIBRARY)
  set(_remat_blas_dirs)
  foreach(_prefix ${CMAKE_SYSTEM_PREFIX_PATH})
    if(REMAT_OPENBLAS_PREFER_OPENMP)
      list(APPEND _remat_blas_dirs ${_prefix}/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp)
    endif()
    list(APPEND _remat_blas_dirs ${_prefix}/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-pthread
                                 ${_prefix}/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-serial)
  endforeach()
  find_library(REMAT_OPENBLAS_LIBRARY NAMES openblas PATHS ${_remat_blas_dirs} NO_DEFAULT_PATH)
  if(NOT REMAT_OPENBLAS_LIBRARY)
    find_library(REMAT_OPENBLAS_LIBRARY NAMES openblas)
  endif()
  if(NOT REMAT_OPENBLAS_LIBRARY)
    set(REMAT_OPENBLAS_LIBRARY "" CACHE FILEPATH "OpenBLAS library" FORCE)
  endif()
endif()

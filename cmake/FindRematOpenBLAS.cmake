# Finds OpenBLAS for remat (sets REMAT_OPENBLAS_LIBRARY). Used at build time and by
# rematConfig.cmake, so a consumer links the same library the build found.
if(NOT REMAT_OPENBLAS_LIBRARY)
  find_library(REMAT_OPENBLAS_LIBRARY NAMES openblas
    PATH_SUFFIXES openblas-pthread openblas-openmp openblas-serial)
  if(NOT REMAT_OPENBLAS_LIBRARY)
    set(REMAT_OPENBLAS_LIBRARY "" CACHE FILEPATH "OpenBLAS library" FORCE)
  endif()
endif()

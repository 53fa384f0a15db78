#pragma once
// SPDX-License-Identifier: MIT
// Build-wide switches and portability macros. Everything here is a macro or a constant;
// no header of the library needs anything but this file to know how it is compiled.

#if defined(__CUDACC__)
#define REMAT_HOST_DEVICE __host__ __device__
#else
#define REMAT_HOST_DEVICE
#endif

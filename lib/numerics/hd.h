// __host__ __device__ when compiled by nvcc, nothing otherwise: small math helpers shared by
// kernels and their CPU references/tests.
#pragma once

#if defined(__CUDACC__)
#define IB_HD __host__ __device__ __forceinline__
#else
#define IB_HD inline
#endif

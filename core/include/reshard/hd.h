// reshard — marks code that must compile for both host and CUDA device.
#pragma once

#if defined(__CUDACC__)
#define RESHARD_HD __host__ __device__
#else
#define RESHARD_HD
#endif

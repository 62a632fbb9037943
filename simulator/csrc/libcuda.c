/* The simulated libcuda.so.1: enough of the CUDA driver API for a program to ask which CUDA version
 * the driver supports (the value `nvidia-ctk simulate create --cuda-version` chose). It has no device
 * to offer: cuInit reports CUDA_ERROR_NO_DEVICE, as the real library does on a host without GPUs. */
#ifndef NVSIM_CUDA_VERSION
#error "build with -DNVSIM_CUDA_VERSION=<int>, e.g. 12040"
#endif

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_NO_DEVICE 100

__attribute__((visibility("default"))) int cuDriverGetVersion(int *version)
{
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    *version = NVSIM_CUDA_VERSION;
    return CUDA_SUCCESS;
}

__attribute__((visibility("default"))) int cuInit(unsigned int flags)
{
    (void)flags;
    return CUDA_ERROR_NO_DEVICE;
}

/* The simulated libnvidia-ml.so.1: MIG mode, MIG device handles, GPU and compute instances.
 *
 * Every simulated MIG device is one GPU instance with one compute instance: spanning all of it (what
 * `nvidia-smi mig -cgi <profiles> -C` creates), or of fewer slices (`-cci 0` in a 3g GPU instance: a
 * 1c.3g.20gb device). Compute instance profile indices and ids coincide, as on real A100/H100
 * drivers: 0..4 for 1, 2, 3, 4 and 7 slices. */
#include <stdio.h>
#include <string.h>

#include "nvml_internal.h"

static const unsigned int ci_profile_slices[] = {1, 2, 3, 4, 7};
#define CI_PROFILES (sizeof(ci_profile_slices) / sizeof(ci_profile_slices[0]))

#define INITIALIZED_OR_FAIL()                         \
    do {                                              \
        nvmlReturn_t r_ = sim_check_initialized();    \
        if (r_ != NVML_SUCCESS)                       \
            return r_;                                \
    } while (0)

static const struct sim_gi_profile *gi_profile_of(const struct nvmlDevice_st *mig_dev)
{
    return &mig_dev->gpu->profiles[mig_dev->mig->gi_profile];
}

static unsigned int ci_profile_of(unsigned int slices)
{
    for (unsigned int i = 0; i < CI_PROFILES; i++)
        if (ci_profile_slices[i] == slices)
            return i;
    return 0;
}

/* A GPU (not MIG) handle of a MIG-capable model with MIG enabled; else the NVML error. */
static nvmlReturn_t mig_parent(nvmlDevice_t handle, struct nvmlDevice_st **out)
{
    struct nvmlDevice_st *dev = sim_device(handle);
    if (!dev || dev->mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (dev->gpu->total_slices == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *out = dev;
    return NVML_SUCCESS;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t handle, unsigned int *current, unsigned int *pending)
{
    INITIALIZED_OR_FAIL();
    struct nvmlDevice_st *dev;
    nvmlReturn_t ret = mig_parent(handle, &dev);
    if (ret != NVML_SUCCESS)
        return ret;
    if (!current || !pending)
        return NVML_ERROR_INVALID_ARGUMENT;
    *current = *pending = dev->gpu->mig_enabled ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
}

/* Zero when MIG is not supported or not enabled, as documented for the real call. */
NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t handle, unsigned int *count)
{
    INITIALIZED_OR_FAIL();
    struct nvmlDevice_st *dev = sim_device(handle);
    if (!dev || dev->mig || !count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = dev->gpu->mig_enabled ? dev->gpu->total_slices : 0;
    return NVML_SUCCESS;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t handle, unsigned int index,
                                                               nvmlDevice_t *mig_device)
{
    INITIALIZED_OR_FAIL();
    struct nvmlDevice_st *dev = sim_device(handle);
    if (!dev || dev->mig || !mig_device)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int max = dev->gpu->mig_enabled ? dev->gpu->total_slices : 0;
    if (index >= max)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (index >= sim_mig_count(dev))
        return NVML_ERROR_NOT_FOUND;
    *mig_device = sim_mig_device(dev, index);
    return NVML_SUCCESS;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t handle, unsigned int *is_mig)
{
    INITIALIZED_OR_FAIL();
    struct nvmlDevice_st *dev = sim_device(handle);
    if (!dev || !is_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    *is_mig = dev->mig != NULL;
    return NVML_SUCCESS;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t handle, nvmlDevice_t *device)
{
    INITIALIZED_OR_FAIL();
    struct nvmlDevice_st *dev = sim_device(handle);
    if (!dev || !dev->mig || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = dev->parent;
    return NVML_SUCCESS;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t handle, unsigned int *id)
{
    INITIALIZED_OR_FAIL();
    struct nvmlDevice_st *dev = sim_device(handle);
    if (!dev || !id)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!dev->mig)
        return NVML_ERROR_NOT_SUPPORTED;
    *id = dev->mig->gi_id;
    return NVML_SUCCESS;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t handle, unsigned int *id)
{
    INITIALIZED_OR_FAIL();
    struct nvmlDevice_st *dev = sim_device(handle);
    if (!dev || !id)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!dev->mig)
        return NVML_ERROR_NOT_SUPPORTED;
    *id = dev->mig->ci_id;
    return NVML_SUCCESS;
}

/* Only MIG device handles have attributes; the real call refuses full GPUs the same way. */
NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t handle, nvmlDeviceAttributes_t *attrs)
{
    INITIALIZED_OR_FAIL();
    struct nvmlDevice_st *dev = sim_device(handle);
    if (!dev || !attrs)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!dev->mig)
        return NVML_ERROR_NOT_SUPPORTED;
    const struct sim_gi_profile *p = gi_profile_of(dev);
    /* the compute instance's share of the multiprocessors (as its profile info says); the memory and the
     * engines are the GPU instance's, shared by its compute instances */
    attrs->multiprocessorCount = p->multiprocessors * dev->mig->ci_slices / p->slices;
    attrs->sharedCopyEngineCount = p->copy_engines;
    attrs->sharedDecoderCount = p->decoders;
    attrs->sharedEncoderCount = p->encoders;
    attrs->sharedJpegCount = p->jpegs;
    attrs->sharedOfaCount = p->ofas;
    attrs->gpuInstanceSliceCount = p->slices;
    attrs->computeInstanceSliceCount = dev->mig->ci_slices;
    attrs->memorySizeMB = p->memory_mb;
    return NVML_SUCCESS;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t h, nvmlDeviceAttributes_t *a)
{
    return nvmlDeviceGetAttributes_v2(h, a);
}

/* ---- GPU instance profiles and instances ---- */

static nvmlReturn_t find_gi_profile(nvmlDevice_t handle, unsigned int profile, const struct sim_gi_profile **out)
{
    struct nvmlDevice_st *dev;
    nvmlReturn_t ret = mig_parent(handle, &dev);
    if (ret != NVML_SUCCESS)
        return ret;
    if (profile >= NVML_GPU_INSTANCE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!dev->gpu->mig_enabled)
        return NVML_ERROR_NOT_SUPPORTED;
    for (unsigned int i = 0; i < dev->gpu->profile_count; i++) {
        if (dev->gpu->profiles[i].index == profile) {
            *out = &dev->gpu->profiles[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_SUPPORTED;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t handle, unsigned int profile,
                                                               nvmlGpuInstanceProfileInfo_t *info)
{
    INITIALIZED_OR_FAIL();
    const struct sim_gi_profile *p;
    nvmlReturn_t ret = find_gi_profile(handle, profile, &p);
    if (ret != NVML_SUCCESS)
        return ret;
    if (!info)
        return NVML_ERROR_INVALID_ARGUMENT;
    *info = (nvmlGpuInstanceProfileInfo_t){p->id, 0, p->slices, p->instance_count, p->multiprocessors,
                                           p->copy_engines, p->decoders, p->encoders, p->jpegs, p->ofas,
                                           p->memory_mb};
    return NVML_SUCCESS;
}

/* The versioned form fills a v2 or v3 struct, chosen by the version stamp the caller put in it. */
NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t handle, unsigned int profile,
                                                                void *info)
{
    INITIALIZED_OR_FAIL();
    const struct sim_gi_profile *p;
    nvmlReturn_t ret = find_gi_profile(handle, profile, &p);
    if (ret != NVML_SUCCESS)
        return ret;
    if (!info)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int version = *(unsigned int *)info;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    snprintf(name, sizeof(name), "MIG %s", p->name);
    if (version == nvmlGpuInstanceProfileInfo_v2) {
        nvmlGpuInstanceProfileInfo_v2_t *v2 = info;
        *v2 = (nvmlGpuInstanceProfileInfo_v2_t){version, p->id, 0, p->slices, p->instance_count,
                                                p->multiprocessors, p->copy_engines, p->decoders,
                                                p->encoders, p->jpegs, p->ofas, p->memory_mb, {0}};
        memcpy(v2->name, name, sizeof(name));
    } else if (version == nvmlGpuInstanceProfileInfo_v3) {
        nvmlGpuInstanceProfileInfo_v3_t *v3 = info;
        *v3 = (nvmlGpuInstanceProfileInfo_v3_t){version, p->id, p->slices, p->instance_count,
                                                p->multiprocessors, p->copy_engines, p->decoders,
                                                p->encoders, p->jpegs, p->ofas, p->memory_mb, {0}, 0};
        memcpy(v3->name, name, sizeof(name));
    } else {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    return NVML_SUCCESS;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t handle, unsigned int id,
                                                        nvmlGpuInstance_t *gpu_instance)
{
    INITIALIZED_OR_FAIL();
    struct nvmlDevice_st *dev;
    nvmlReturn_t ret = mig_parent(handle, &dev);
    if (ret != NVML_SUCCESS)
        return ret;
    if (!gpu_instance)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!dev->gpu->mig_enabled)
        return NVML_ERROR_INVALID_STATE;
    for (unsigned int i = 0; i < sim_mig_count(dev); i++) {
        struct nvmlDevice_st *mig = sim_mig_device(dev, i);
        if (mig->mig->gi_id == id) {
            *gpu_instance = mig->gi;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t handle, unsigned int profile_id,
                                                     nvmlGpuInstance_t *gpu_instances, unsigned int *count)
{
    INITIALIZED_OR_FAIL();
    struct nvmlDevice_st *dev;
    nvmlReturn_t ret = mig_parent(handle, &dev);
    if (ret != NVML_SUCCESS)
        return ret;
    if (!gpu_instances || !count)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!dev->gpu->mig_enabled)
        return NVML_ERROR_INVALID_STATE;
    unsigned int n = 0;
    for (unsigned int i = 0; i < sim_mig_count(dev); i++) {
        struct nvmlDevice_st *mig = sim_mig_device(dev, i);
        if (gi_profile_of(mig)->id == profile_id)
            gpu_instances[n++] = mig->gi;
    }
    *count = n;
    return NVML_SUCCESS;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t handle, nvmlGpuInstanceInfo_t *info)
{
    INITIALIZED_OR_FAIL();
    struct nvmlGpuInstance_st *gi = sim_gpu_instance(handle);
    if (!gi || !info)
        return NVML_ERROR_INVALID_ARGUMENT;
    const struct nvmlDevice_st *mig = gi->mig_device;
    info->device = mig->parent;
    info->id = mig->mig->gi_id;
    info->profileId = gi_profile_of(mig)->id;
    info->placement.start = mig->mig->placement_start;
    info->placement.size = mig->mig->placement_size;
    return NVML_SUCCESS;
}

/* ---- compute instance profiles and instances ---- */

static nvmlReturn_t find_ci_profile(nvmlGpuInstance_t handle, unsigned int profile, unsigned int engine,
                                    const struct sim_gi_profile **gi_out, unsigned int *slices)
{
    struct nvmlGpuInstance_st *gi = sim_gpu_instance(handle);
    if (!gi || profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT ||
        engine >= NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    const struct sim_gi_profile *p = gi_profile_of(gi->mig_device);
    /* A compute instance is at most as large as its GPU instance; 4-slice instances have no 3c. */
    if (profile >= CI_PROFILES || ci_profile_slices[profile] > p->slices ||
        (p->slices == 4 && ci_profile_slices[profile] == 3))
        return NVML_ERROR_NOT_SUPPORTED;
    *gi_out = p;
    *slices = ci_profile_slices[profile];
    return NVML_SUCCESS;
}

static void ci_profile_name(const struct sim_gi_profile *p, unsigned int slices, char *out, size_t size)
{
    if (slices == p->slices)
        snprintf(out, size, "MIG %s", p->name);
    else
        snprintf(out, size, "MIG %uc.%s", slices, p->name);
}

NVMLSIM_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t handle,
                                                                         unsigned int profile,
                                                                         unsigned int engine,
                                                                         nvmlComputeInstanceProfileInfo_t *info)
{
    INITIALIZED_OR_FAIL();
    const struct sim_gi_profile *p;
    unsigned int c;
    nvmlReturn_t ret = find_ci_profile(handle, profile, engine, &p, &c);
    if (ret != NVML_SUCCESS)
        return ret;
    if (!info)
        return NVML_ERROR_INVALID_ARGUMENT;
    *info = (nvmlComputeInstanceProfileInfo_t){profile, c, p->slices / c, p->multiprocessors * c / p->slices,
                                               p->copy_engines, p->decoders, p->encoders, p->jpegs, p->ofas};
    return NVML_SUCCESS;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t handle,
                                                                          unsigned int profile,
                                                                          unsigned int engine, void *info)
{
    INITIALIZED_OR_FAIL();
    const struct sim_gi_profile *p;
    unsigned int c;
    nvmlReturn_t ret = find_ci_profile(handle, profile, engine, &p, &c);
    if (ret != NVML_SUCCESS)
        return ret;
    if (!info)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int version = *(unsigned int *)info;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    ci_profile_name(p, c, name, sizeof(name));
    if (version == nvmlComputeInstanceProfileInfo_v2) {
        nvmlComputeInstanceProfileInfo_v2_t *v2 = info;
        *v2 = (nvmlComputeInstanceProfileInfo_v2_t){version, profile, c, p->slices / c,
                                                    p->multiprocessors * c / p->slices, p->copy_engines,
                                                    p->decoders, p->encoders, p->jpegs, p->ofas, {0}};
        memcpy(v2->name, name, sizeof(name));
    } else if (version == nvmlComputeInstanceProfileInfo_v3) {
        nvmlComputeInstanceProfileInfo_v3_t *v3 = info;
        *v3 = (nvmlComputeInstanceProfileInfo_v3_t){version, profile, c, p->slices / c,
                                                    p->multiprocessors * c / p->slices, p->copy_engines,
                                                    p->decoders, p->encoders, p->jpegs, p->ofas, {0}, 0};
        memcpy(v3->name, name, sizeof(name));
    } else {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    return NVML_SUCCESS;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t handle, unsigned int id,
                                                                 nvmlComputeInstance_t *compute_instance)
{
    INITIALIZED_OR_FAIL();
    struct nvmlGpuInstance_st *gi = sim_gpu_instance(handle);
    if (!gi || !compute_instance)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (gi->mig_device->mig->ci_id != id)
        return NVML_ERROR_NOT_FOUND;
    *compute_instance = gi->ci;
    return NVML_SUCCESS;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t handle, unsigned int profile_id,
                                                              nvmlComputeInstance_t *compute_instances,
                                                              unsigned int *count)
{
    INITIALIZED_OR_FAIL();
    struct nvmlGpuInstance_st *gi = sim_gpu_instance(handle);
    if (!gi || !compute_instances || !count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = 0;
    if (profile_id == ci_profile_of(gi->mig_device->mig->ci_slices))
        compute_instances[(*count)++] = gi->ci;
    return NVML_SUCCESS;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t handle,
                                                         nvmlComputeInstanceInfo_t *info)
{
    INITIALIZED_OR_FAIL();
    struct nvmlComputeInstance_st *ci = sim_compute_instance(handle);
    if (!ci || !info)
        return NVML_ERROR_INVALID_ARGUMENT;
    const struct nvmlDevice_st *mig = ci->gi->mig_device;
    unsigned int slices = mig->mig->ci_slices;
    info->device = mig->parent;
    info->gpuInstance = ci->gi;
    info->id = mig->mig->ci_id;
    info->profileId = ci_profile_of(slices);
    info->placement.start = 0;
    info->placement.size = slices;
    return NVML_SUCCESS;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t h, nvmlComputeInstanceInfo_t *i)
{
    return nvmlComputeInstanceGetInfo_v2(h, i);
}

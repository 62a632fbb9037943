/* The simulated libnvidia-ml.so.1: per-device queries (identity, PCI, memory, brand, architecture).
 * A MIG device handle answers with its own name, UUID and memory and its parent's PCI location. */
#include <stdio.h>
#include <string.h>

#include "nvml_internal.h"

static void format_bus_id(const struct sim_gpu *gpu, char *out, size_t size)
{
    snprintf(out, size, "%08X:%02X:%02X.0", gpu->pci_domain, gpu->pci_bus, gpu->pci_device);
}

/* ---- per-device queries ---- */

#define DEVICE_OR_FAIL(var, handle)                                  \
    nvmlReturn_t init_ret_ = sim_check_initialized();               \
    if (init_ret_ != NVML_SUCCESS)                                   \
        return init_ret_;                                            \
    struct nvmlDevice_st *var = sim_device(handle);                  \
    if (!var)                                                        \
        return NVML_ERROR_INVALID_ARGUMENT;                          \
    nvmlReturn_t lost_ret_ = sim_device_answers(var);                \
    if (lost_ret_ != NVML_SUCCESS)                                   \
        return lost_ret_;

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t handle, unsigned int *index)
{
    DEVICE_OR_FAIL(dev, handle);
    if (!index)
        return NVML_ERROR_INVALID_ARGUMENT;
    *index = dev->index;
    return NVML_SUCCESS;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t handle, char *name, unsigned int length)
{
    DEVICE_OR_FAIL(dev, handle);
    char value[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    const struct sim_gi_profile *profile = dev->mig ? &dev->gpu->profiles[dev->mig->gi_profile] : NULL;
    if (profile && dev->mig->ci_slices != profile->slices)   /* a smaller compute instance: "1c.3g.20gb" */
        snprintf(value, sizeof(value), "%s MIG %uc.%s", dev->gpu->name, dev->mig->ci_slices, profile->name);
    else if (profile)
        snprintf(value, sizeof(value), "%s MIG %s", dev->gpu->name, profile->name);
    else
        snprintf(value, sizeof(value), "%s", dev->gpu->name);
    return sim_copy_string(name, length, value);
}

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t handle, char *uuid, unsigned int length)
{
    DEVICE_OR_FAIL(dev, handle);
    return sim_copy_string(uuid, length, dev->mig ? dev->mig->uuid : dev->gpu->uuid);
}

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t handle, unsigned int *minor)
{
    DEVICE_OR_FAIL(dev, handle);
    if (!minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (dev->mig)
        return NVML_ERROR_NOT_SUPPORTED; /* a MIG device has no /dev/nvidia<N> of its own */
    *minor = dev->gpu->minor;
    return NVML_SUCCESS;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t handle, nvmlPciInfo_t *pci)
{
    DEVICE_OR_FAIL(dev, handle);
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    sim_fill_pci_info(dev->gpu, pci); /* a MIG device reports its parent's PCI location */
    return NVML_SUCCESS;
}

void sim_fill_pci_info(const struct sim_gpu *gpu, nvmlPciInfo_t *pci)
{
    memset(pci, 0, sizeof(*pci));
    pci->domain = gpu->pci_domain;
    pci->bus = gpu->pci_bus;
    pci->device = gpu->pci_device;
    pci->pciDeviceId = gpu->pci_device_id;
    pci->pciSubSystemId = gpu->pci_subsystem_id;
    format_bus_id(gpu, pci->busId, sizeof(pci->busId));
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0",
             gpu->pci_domain, gpu->pci_bus, gpu->pci_device);
}

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t h, nvmlPciInfo_t *p) { return nvmlDeviceGetPciInfo_v3(h, p); }
NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t h, nvmlPciInfo_t *p) { return nvmlDeviceGetPciInfo_v3(h, p); }

static unsigned long long device_memory_mb(const struct nvmlDevice_st *dev)
{
    return dev->mig ? dev->gpu->profiles[dev->mig->gi_profile].memory_mb : dev->gpu->memory_mb;
}

/* The driver reserves a little memory on every GPU; nothing else is in use on an idle host. */
static unsigned long long reserved_bytes(const struct nvmlDevice_st *dev)
{
    return dev->mig ? 0ULL : 512ULL << 20;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t handle, nvmlMemory_t *memory)
{
    DEVICE_OR_FAIL(dev, handle);
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    memory->total = device_memory_mb(dev) << 20;
    memory->used = reserved_bytes(dev);
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t handle, nvmlMemory_v2_t *memory)
{
    DEVICE_OR_FAIL(dev, handle);
    if (!memory)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memory->total = device_memory_mb(dev) << 20;
    memory->reserved = reserved_bytes(dev);
    memory->used = 0;
    memory->free = memory->total - memory->reserved;
    return NVML_SUCCESS;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t handle, nvmlBrandType_t *brand)
{
    DEVICE_OR_FAIL(dev, handle);
    if (!brand)
        return NVML_ERROR_INVALID_ARGUMENT;
    *brand = dev->gpu->brand;
    return NVML_SUCCESS;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t handle, nvmlDeviceArchitecture_t *arch)
{
    DEVICE_OR_FAIL(dev, handle);
    if (!arch)
        return NVML_ERROR_INVALID_ARGUMENT;
    *arch = dev->gpu->architecture;
    return NVML_SUCCESS;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t handle, int *major, int *minor)
{
    DEVICE_OR_FAIL(dev, handle);
    if (!major || !minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    *major = dev->gpu->cc_major;
    *minor = dev->gpu->cc_minor;
    return NVML_SUCCESS;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t handle, char *serial, unsigned int length)
{
    DEVICE_OR_FAIL(dev, handle);
    char value[32];
    snprintf(value, sizeof(value), "13240%08u", dev->gpu->minor + 1);
    return sim_copy_string(serial, length, value);
}

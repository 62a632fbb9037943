/* The simulated libnvidia-ml.so.1: how the GPUs are connected (the host's --pcie and --nvlink options,
 * compiled into sim_host.pcie_levels and each GPU's nvlink_remote).
 *
 * Calls on a MIG device handle answer NVML_ERROR_NOT_SUPPORTED: links belong to whole GPUs. */
#include <string.h>

#include "nvml_internal.h"

static unsigned int host_index(const struct nvmlDevice_st *dev)
{
    return (unsigned int)(dev->gpu - sim_host.gpus);
}

/* Two whole-GPU handles, or the NVML error. */
static nvmlReturn_t gpu_pair(nvmlDevice_t h1, nvmlDevice_t h2, struct nvmlDevice_st **a, struct nvmlDevice_st **b)
{
    nvmlReturn_t ret = sim_check_initialized();
    if (ret != NVML_SUCCESS)
        return ret;
    *a = sim_device(h1);
    *b = sim_device(h2);
    if (!*a || !*b)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((*a)->mig || (*b)->mig)
        return NVML_ERROR_NOT_SUPPORTED;
    if ((ret = sim_device_answers(*a)) != NVML_SUCCESS)
        return ret;
    return sim_device_answers(*b);
}

static unsigned int nvlinks_between(const struct sim_gpu *gpu, unsigned int remote)
{
    unsigned int count = 0;
    for (unsigned int l = 0; l < gpu->nvlink_count; l++)
        count += gpu->nvlink_remote[l] == (int)remote;
    return count;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                               nvmlGpuTopologyLevel_t *pathInfo)
{
    struct nvmlDevice_st *a, *b;
    nvmlReturn_t ret = gpu_pair(device1, device2, &a, &b);
    if (ret != NVML_SUCCESS)
        return ret;
    if (!pathInfo)
        return NVML_ERROR_INVALID_ARGUMENT;
    *pathInfo = a == b ? NVML_TOPOLOGY_INTERNAL
                       : sim_host.pcie_levels[host_index(a) * sim_host.gpu_count + host_index(b)];
    return NVML_SUCCESS;
}

/* Peer-to-peer works over NVLink, or over PCIe below a common host bridge; atomics only over NVLink. */
NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                                  nvmlGPUP2PCapsIndex_t p2pIndex, nvmlGpuP2PStatus_t *p2pStatus)
{
    struct nvmlDevice_st *a, *b;
    nvmlReturn_t ret = gpu_pair(device1, device2, &a, &b);
    if (ret != NVML_SUCCESS)
        return ret;
    if (!p2pStatus || a == b || (unsigned int)p2pIndex > NVML_P2P_CAPS_INDEX_PCI)
        return NVML_ERROR_INVALID_ARGUMENT;
    int nvlink = nvlinks_between(a->gpu, host_index(b)) > 0;
    int pcie = sim_host.pcie_levels[host_index(a) * sim_host.gpu_count + host_index(b)] <= NVML_TOPOLOGY_HOSTBRIDGE;
    switch ((unsigned int)p2pIndex) {
    case NVML_P2P_CAPS_INDEX_NVLINK:
        *p2pStatus = nvlink ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
        break;
    case NVML_P2P_CAPS_INDEX_ATOMICS:
        *p2pStatus = nvlink ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
        break;
    case NVML_P2P_CAPS_INDEX_PCI:
        *p2pStatus = pcie ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED;
        break;
    default: /* read, write */
        *p2pStatus = nvlink || pcie ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED;
    }
    return NVML_SUCCESS;
}

/* A whole GPU with NVLink and one of its links, or the NVML error. */
static nvmlReturn_t gpu_link(nvmlDevice_t handle, unsigned int link, struct nvmlDevice_st **out)
{
    nvmlReturn_t ret = sim_check_initialized();
    if (ret != NVML_SUCCESS)
        return ret;
    struct nvmlDevice_st *dev = sim_device(handle);
    if (!dev)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((ret = sim_device_answers(dev)) != NVML_SUCCESS)
        return ret;
    if (dev->mig || dev->gpu->nvlink_count == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    if (link >= dev->gpu->nvlink_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *out = dev;
    return NVML_SUCCESS;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t *isActive)
{
    struct nvmlDevice_st *dev;
    nvmlReturn_t ret = gpu_link(device, link, &dev);
    if (ret != NVML_SUCCESS)
        return ret;
    if (!isActive)
        return NVML_ERROR_INVALID_ARGUMENT;
    *isActive = dev->gpu->nvlink_remote[link] >= 0 ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

/* An inactive link has nothing at its other end: NVML_ERROR_NOT_SUPPORTED. */
NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci)
{
    struct nvmlDevice_st *dev;
    nvmlReturn_t ret = gpu_link(device, link, &dev);
    if (ret != NVML_SUCCESS)
        return ret;
    if (!pci)
        return NVML_ERROR_INVALID_ARGUMENT;
    int remote = dev->gpu->nvlink_remote[link];
    if (remote < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    sim_fill_pci_info(&sim_host.gpus[remote], pci);
    return NVML_SUCCESS;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetNvLinkRemotePciInfo_v2(device, link, pci);
}

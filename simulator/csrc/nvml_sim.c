/* The simulated libnvidia-ml.so.1: initialisation, the visibility rule, handles and enumeration.
 *
 * Visibility follows the real library: a GPU is listed only when the calling process can open its
 * device node, and a MIG device only when its GPU- and compute-instance capability nodes open too.
 * The simulated nodes have no driver behind them, so an open that reaches the (absent) driver fails
 * with ENXIO: that counts as present. EPERM (device cgroup), EACCES or ENOENT count as absent.
 *
 * Where the nodes are looked up: the library finds its own file (dladdr; for the static nvidia-smi,
 * /proc/self/exe). If it sits at <root>/usr/lib/x86_64-linux-gnu (nvidia-smi: <root>/usr/bin) and
 * <root>/.nvidia-simulated-host.json exists, the nodes are under <root>/dev: the library was loaded
 * from a simulated host's driver root. Otherwise (inside a container, where the marker is never
 * injected) they are under /dev, so a container sees exactly the nodes injected into it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nvml_internal.h"

#define MARKER_NAME ".nvidia-simulated-host.json"
#ifdef NVMLSIM_STATIC_TOOL
#define SELF_DIR_SUFFIX "/usr/bin"
#else
#define SELF_DIR_SUFFIX "/usr/lib/x86_64-linux-gnu"
#endif

static pthread_mutex_t sim_lock = PTHREAD_MUTEX_INITIALIZER;
static int init_count;

static struct nvmlDevice_st gpu_handles[SIM_MAX_GPUS];
static struct nvmlDevice_st mig_handles[SIM_MAX_GPUS][SIM_MAX_MIGS];
static struct nvmlGpuInstance_st gi_handles[SIM_MAX_GPUS][SIM_MAX_MIGS];
static struct nvmlComputeInstance_st ci_handles[SIM_MAX_GPUS][SIM_MAX_MIGS];
static unsigned int visible_gpus;
static unsigned int visible_migs[SIM_MAX_GPUS];

static int node_opens(const char *path, int flags)
{
    int fd = open(path, flags | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd >= 0) {
        close(fd);
        return 1;
    }
    return errno == ENXIO;
}

static int self_directory(char *out, size_t size)
{
    char path[PATH_MAX];
#ifdef NVMLSIM_STATIC_TOOL
    ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
    if (n <= 0)
        return -1;
    path[n] = '\0';
#else
    Dl_info info;
    if (!dladdr((void *)self_directory, &info) || !info.dli_fname)
        return -1;
    snprintf(path, sizeof(path), "%s", info.dli_fname);
#endif
    char *slash = strrchr(path, '/');
    if (!slash)
        return -1;
    *slash = '\0';
    char resolved[PATH_MAX];
    if (!realpath(path[0] ? path : "/", resolved))
        return -1;
    snprintf(out, size, "%s", resolved);
    return 0;
}

/* "<root>" for a library inside a simulated host's driver root, else "" (e.g. in a container). */
static void host_root(char *out, size_t size)
{
    char dir[PATH_MAX], marker[PATH_MAX + 64];
    out[0] = '\0';
    if (self_directory(dir, sizeof(dir)) < 0)
        return;
    size_t len = strlen(dir), suffix = strlen(SELF_DIR_SUFFIX);
    if (len <= suffix || strcmp(dir + len - suffix, SELF_DIR_SUFFIX) != 0)
        return;
    dir[len - suffix] = '\0';
    snprintf(marker, sizeof(marker), "%s/%s", dir, MARKER_NAME);
    if (access(marker, F_OK) == 0)
        snprintf(out, size, "%s", dir);
}

/* "<root>/dev" for a library inside a simulated host's driver root, else "/dev". */
static void device_directory(char *out, size_t size)
{
    char root[PATH_MAX];
    host_root(root, sizeof(root));
    snprintf(out, size, "%s/dev", root);
}

static char state_dir[PATH_MAX];

const char *sim_state_dir(void)
{
    return state_dir;
}

nvmlReturn_t sim_device_answers(const struct nvmlDevice_st *dev)
{
    char path[PATH_MAX + 128];
    if (!state_dir[0])
        return NVML_SUCCESS;
    snprintf(path, sizeof(path), "%s/" SIM_LOST_DIR "/%s", state_dir, dev->gpu->uuid);
    return access(path, F_OK) == 0 ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
}

static void forget_handles(void)
{
    memset(gpu_handles, 0, sizeof(gpu_handles));
    memset(mig_handles, 0, sizeof(mig_handles));
    memset(gi_handles, 0, sizeof(gi_handles));
    memset(ci_handles, 0, sizeof(ci_handles));
    memset(visible_migs, 0, sizeof(visible_migs));
    visible_gpus = 0;
}

static void enumerate(void)
{
    char devdir[PATH_MAX], node[PATH_MAX + 64];
    device_directory(devdir, sizeof(devdir));

    forget_handles();
    for (unsigned int g = 0; g < sim_host.gpu_count && g < SIM_MAX_GPUS; g++) {
        const struct sim_gpu *gpu = &sim_host.gpus[g];
        snprintf(node, sizeof(node), "%s/nvidia%u", devdir, gpu->minor);
        if (!node_opens(node, O_RDWR))
            continue;
        unsigned int v = visible_gpus++;
        struct nvmlDevice_st *dev = &gpu_handles[v];
        *dev = (struct nvmlDevice_st){SIM_HANDLE_MAGIC, gpu, NULL, v, NULL, NULL};
        visible_migs[v] = 0;
        for (unsigned int m = 0; gpu->mig_enabled && m < gpu->mig_count && m < SIM_MAX_MIGS; m++) {
            const struct sim_mig *mig = &gpu->migs[m];
            char ci_node[PATH_MAX + 64];
            snprintf(node, sizeof(node), "%s/nvidia-caps/nvidia-cap%u", devdir, mig->gi_cap_minor);
            snprintf(ci_node, sizeof(ci_node), "%s/nvidia-caps/nvidia-cap%u", devdir, mig->ci_cap_minor);
            if (!node_opens(node, O_RDONLY) || !node_opens(ci_node, O_RDONLY))
                continue;
            unsigned int k = visible_migs[v]++;
            struct nvmlDevice_st *md = &mig_handles[v][k];
            struct nvmlGpuInstance_st *gi = &gi_handles[v][k];
            struct nvmlComputeInstance_st *ci = &ci_handles[v][k];
            *md = (struct nvmlDevice_st){SIM_HANDLE_MAGIC, gpu, mig, k, dev, gi};
            *gi = (struct nvmlGpuInstance_st){SIM_HANDLE_MAGIC, md, ci};
            *ci = (struct nvmlComputeInstance_st){SIM_HANDLE_MAGIC, gi};
        }
    }
}

static nvmlReturn_t initialize(void)
{
    char devdir[PATH_MAX], ctl[PATH_MAX + 16];
    nvmlReturn_t ret = NVML_SUCCESS;
    pthread_mutex_lock(&sim_lock);
    if (init_count == 0) {
        /* Like the real library: no usable /dev/nvidiactl means no driver to talk to. */
        device_directory(devdir, sizeof(devdir));
        snprintf(ctl, sizeof(ctl), "%s/nvidiactl", devdir);
        if (!node_opens(ctl, O_RDWR))
            ret = NVML_ERROR_DRIVER_NOT_LOADED;
        else
            enumerate();
        char root[PATH_MAX];
        host_root(root, sizeof(root));
        if (root[0])
            snprintf(state_dir, sizeof(state_dir), "%s/" SIM_STATE_DIR, root);
        else
            state_dir[0] = '\0';
    }
    if (ret == NVML_SUCCESS)
        init_count++;
    pthread_mutex_unlock(&sim_lock);
    return ret;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlInit_v2(void) { return initialize(); }
NVMLSIM_EXPORT nvmlReturn_t nvmlInit(void) { return initialize(); }

NVMLSIM_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags; /* NO_GPUS / NO_ATTACH change nothing for a driverless simulation */
    return initialize();
}

NVMLSIM_EXPORT nvmlReturn_t nvmlShutdown(void)
{
    nvmlReturn_t ret = NVML_SUCCESS;
    pthread_mutex_lock(&sim_lock);
    if (init_count == 0)
        ret = NVML_ERROR_UNINITIALIZED;
    else if (--init_count == 0)
        forget_handles(); /* handles from before the shutdown are stale from now on */
    pthread_mutex_unlock(&sim_lock);
    return ret;
}

nvmlReturn_t sim_check_initialized(void)
{
    return init_count > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

/* A handle is valid only if it points at an element of our own table and that element is live. */
#define HANDLE_IN(table, ptr)                                                               \
    ((uintptr_t)(ptr) >= (uintptr_t)(table) &&                                              \
     (uintptr_t)(ptr) < (uintptr_t)(table) + sizeof(table) &&                               \
     ((uintptr_t)(ptr) - (uintptr_t)(table)) % sizeof(*(ptr)) == 0)

struct nvmlDevice_st *sim_device(nvmlDevice_t h)
{
    if (!h || !(HANDLE_IN(gpu_handles, h) || HANDLE_IN(mig_handles, h)))
        return NULL;
    return h->magic == SIM_HANDLE_MAGIC ? h : NULL;
}

struct nvmlGpuInstance_st *sim_gpu_instance(nvmlGpuInstance_t h)
{
    if (!h || !HANDLE_IN(gi_handles, h))
        return NULL;
    return h->magic == SIM_HANDLE_MAGIC ? h : NULL;
}

struct nvmlComputeInstance_st *sim_compute_instance(nvmlComputeInstance_t h)
{
    if (!h || !HANDLE_IN(ci_handles, h))
        return NULL;
    return h->magic == SIM_HANDLE_MAGIC ? h : NULL;
}

unsigned int sim_mig_count(const struct nvmlDevice_st *gpu)
{
    return visible_migs[gpu - gpu_handles];
}

struct nvmlDevice_st *sim_mig_device(const struct nvmlDevice_st *gpu, unsigned int index)
{
    return &mig_handles[gpu - gpu_handles][index];
}

nvmlReturn_t sim_copy_string(char *out, unsigned int length, const char *value)
{
    if (!out)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, value, strlen(value) + 1);
    return NVML_SUCCESS;
}

NVMLSIM_EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
    switch ((int)result) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 5: return "Already Initialized";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 8: return "Insufficient External Power";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 11: return "Interrupt Request Issue";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 14: return "Corrupted infoROM";
    case 15: return "GPU is lost";
    case 16: return "GPU requires restart";
    case 17: return "The operating system has blocked the request.";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    case 19: return "In use by another client";
    case 20: return "Insufficient Memory";
    case 21: return "No data";
    case 25: return "Argument version mismatch";
    case 26: return "Deprecated";
    case 27: return "Not Ready";
    case 28: return "GPU not found";
    case 29: return "Invalid state";
    default: return "Unknown Error";
    }
}

/* ---- system queries ---- */

NVMLSIM_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    nvmlReturn_t ret = sim_check_initialized();
    return ret != NVML_SUCCESS ? ret : sim_copy_string(version, length, sim_host.driver_version);
}

NVMLSIM_EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    char value[96];
    /* NVML's own version is "<CUDA major>.<driver version>", e.g. "12.550.54.15". */
    snprintf(value, sizeof(value), "%d.%s", sim_host.cuda_version / 1000, sim_host.driver_version);
    return sim_copy_string(version, length, value);
}

NVMLSIM_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version)
{
    if (!version)
        return NVML_ERROR_INVALID_ARGUMENT;
    *version = sim_host.cuda_version; /* works without nvmlInit, like the real call */
    return NVML_SUCCESS;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version)
{
    return nvmlSystemGetCudaDriverVersion(version);
}

/* ---- enumeration ---- */

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
    nvmlReturn_t ret = sim_check_initialized();
    if (ret != NVML_SUCCESS)
        return ret;
    if (!count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = visible_gpus;
    return NVML_SUCCESS;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    nvmlReturn_t ret = sim_check_initialized();
    if (ret != NVML_SUCCESS)
        return ret;
    if (!device || index >= visible_gpus)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((ret = sim_device_answers(&gpu_handles[index])) != NVML_SUCCESS)
        return ret;
    *device = &gpu_handles[index];
    return NVML_SUCCESS;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

/* Accepts GPU and MIG UUIDs, as the real call does since MIG support. */
NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    nvmlReturn_t ret = sim_check_initialized();
    if (ret != NVML_SUCCESS)
        return ret;
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int g = 0; g < visible_gpus; g++) {
        if (strcasecmp(gpu_handles[g].gpu->uuid, uuid) == 0) {
            if ((ret = sim_device_answers(&gpu_handles[g])) != NVML_SUCCESS)
                return ret;
            *device = &gpu_handles[g];
            return NVML_SUCCESS;
        }
        for (unsigned int m = 0; m < visible_migs[g]; m++) {
            if (strcasecmp(mig_handles[g][m].mig->uuid, uuid) == 0) {
                if ((ret = sim_device_answers(&mig_handles[g][m])) != NVML_SUCCESS)
                    return ret;
                *device = &mig_handles[g][m];
                return NVML_SUCCESS;
            }
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id, nvmlDevice_t *device)
{
    nvmlReturn_t ret = sim_check_initialized();
    if (ret != NVML_SUCCESS)
        return ret;
    if (!bus_id || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int domain = 0, bus = 0, dev = 0;
    /* "00000000:07:00.0", "0000:07:00.0" or "07:00.0" */
    if (sscanf(bus_id, "%x:%x:%x.", &domain, &bus, &dev) != 3) {
        domain = 0;
        if (sscanf(bus_id, "%x:%x.", &bus, &dev) != 2)
            return NVML_ERROR_INVALID_ARGUMENT;
    }
    for (unsigned int g = 0; g < visible_gpus; g++) {
        const struct sim_gpu *gpu = gpu_handles[g].gpu;
        if (gpu->pci_domain == domain && gpu->pci_bus == bus && gpu->pci_device == dev) {
            if ((ret = sim_device_answers(&gpu_handles[g])) != NVML_SUCCESS)
                return ret;
            *device = &gpu_handles[g];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

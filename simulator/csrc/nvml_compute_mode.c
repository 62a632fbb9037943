/* The simulated libnvidia-ml.so.1: a GPU's compute mode (nvmlDeviceGetComputeMode/SetComputeMode).
 *
 * The mode lives in the host's state directory, not in the process: <state>/compute_mode/<GPU UUID>
 * holds the mode's number, no file is DEFAULT. So every process of the host (nvidia-smi -c, pynvml,
 * the MPS daemon's caller) sees what another one set, as with a real driver, until the host is rebuilt.
 * A MIG device answers with its GPU's mode and cannot set one (the mode belongs to the whole GPU).
 * Setting needs write access to the state directory (root on a real host); a library loaded outside a
 * simulated host (in a container) has none: NVML_ERROR_NO_PERMISSION, as an unprivileged caller gets. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nvml_internal.h"

static nvmlReturn_t answering_device(nvmlDevice_t handle, struct nvmlDevice_st **out)
{
    nvmlReturn_t ret = sim_check_initialized();
    if (ret != NVML_SUCCESS)
        return ret;
    struct nvmlDevice_st *dev = sim_device(handle);
    if (!dev)
        return NVML_ERROR_INVALID_ARGUMENT;
    ret = sim_device_answers(dev);
    if (ret != NVML_SUCCESS)
        return ret;
    *out = dev;
    return NVML_SUCCESS;
}

/* What a failed write in the state directory means to the caller. */
static nvmlReturn_t write_failure(void)
{
    return errno == EACCES || errno == EROFS || errno == EPERM ? NVML_ERROR_NO_PERMISSION : NVML_ERROR_UNKNOWN;
}

static void mode_file(const struct sim_gpu *gpu, char *out, size_t size)
{
    snprintf(out, size, "%s/" SIM_COMPUTE_MODE_DIR "/%s", sim_state_dir(), gpu->uuid);
}

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t handle, nvmlComputeMode_t *mode)
{
    struct nvmlDevice_st *dev;
    nvmlReturn_t ret = answering_device(handle, &dev);
    if (ret != NVML_SUCCESS)
        return ret;
    if (!mode)
        return NVML_ERROR_INVALID_ARGUMENT;
    *mode = NVML_COMPUTEMODE_DEFAULT;
    if (!sim_state_dir()[0])
        return NVML_SUCCESS;
    char path[PATH_MAX + 128], text[16] = "";
    mode_file(dev->gpu, path, sizeof(path));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
    ssize_t n = read(fd, text, sizeof(text) - 1);
    close(fd);
    if (n <= 0)
        return NVML_ERROR_UNKNOWN;
    text[n] = '\0';
    long value = strtol(text, NULL, 10);
    if (value != NVML_COMPUTEMODE_EXCLUSIVE_PROCESS && value != NVML_COMPUTEMODE_PROHIBITED)
        return NVML_ERROR_UNKNOWN;
    *mode = (nvmlComputeMode_t)value;
    return NVML_SUCCESS;
}

NVMLSIM_EXPORT nvmlReturn_t nvmlDeviceSetComputeMode(nvmlDevice_t handle, nvmlComputeMode_t mode)
{
    struct nvmlDevice_st *dev;
    nvmlReturn_t ret = answering_device(handle, &dev);
    if (ret != NVML_SUCCESS)
        return ret;
    if (mode != NVML_COMPUTEMODE_DEFAULT && mode != NVML_COMPUTEMODE_EXCLUSIVE_PROCESS &&
        mode != NVML_COMPUTEMODE_PROHIBITED)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (dev->mig)
        return NVML_ERROR_NOT_SUPPORTED;
    if (!sim_state_dir()[0])
        return NVML_ERROR_NO_PERMISSION;
    char dir[PATH_MAX + 64], path[PATH_MAX + 128], tmp[PATH_MAX + 160];
    snprintf(dir, sizeof(dir), "%s/" SIM_COMPUTE_MODE_DIR, sim_state_dir());
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)   /* a host built before compute modes has none */
        return write_failure();
    mode_file(dev->gpu, path, sizeof(path));
    if (mode == NVML_COMPUTEMODE_DEFAULT) {
        if (unlink(path) < 0 && errno != ENOENT)
            return write_failure();
        return NVML_SUCCESS;
    }
    /* Written aside and renamed into place: a reader sees the old mode or the new one, never half a file. */
    snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return write_failure();
    char text[8];
    int len = snprintf(text, sizeof(text), "%d\n", (int)mode);
    int ok = write(fd, text, (size_t)len) == len;
    ok &= close(fd) == 0;
    if (!ok || rename(tmp, path) < 0) {
        nvmlReturn_t failed = write_failure();
        unlink(tmp);
        return failed;
    }
    return NVML_SUCCESS;
}

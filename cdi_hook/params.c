/* disable-device-node-modification: the driver's /proc/driver/nvidia/params says, with
 * `ModifyDeviceFiles: 1`, that the CUDA library may create missing /dev/nvidia* nodes itself. A
 * container must use the nodes it was given, so its /proc/driver/nvidia/params is covered by a copy
 * with `ModifyDeviceFiles: 0` (as NVIDIA's hook of that name does, and as the prestart hook's
 * /proc/driver/nvidia view does in legacy mode).
 *
 * The driver's file is read on the host side (params_file: /proc/driver/nvidia/params, or a driver
 * root's copy), at most 64 KiB, without blocking and without following a final link. Nothing to do
 * when the driver has no params file, when it already says 0, or when the container has no
 * /proc/driver/nvidia/params (no driver in its procfs). The copy is mounted read-only by
 * gct_mount_file_over: the target resolved inside the root, the file on a tmpfs of its own. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cdi_hook.h"
#include "internal.h"
#include "libcontainer.h"

#define MAX_PARAMS 65536
#define KEY "ModifyDeviceFiles:"

/* 0 with *data (malloc'd, gct_read_bounded) and *len, 1 when the file is not there, -1 on an error. */
static int read_params(const char *path, char **data, size_t *len, struct hook_error *err)
{
    struct stat st;
    char *buf;
    size_t n;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return 1;
        return hook_fail(err, path, "cannot read the driver's params: %s", strerror(errno));
    }
    if (fstat(fd, &st) < 0) {
        int saved = errno;
        close(fd);
        return hook_fail(err, path, "cannot read the driver's params: %s", strerror(saved));
    }
    if (!S_ISREG(st.st_mode)) {   /* procfs files are regular (of size 0) */
        close(fd);
        return hook_fail(err, path, "the driver's params is not a regular file");
    }
    if (gct_read_bounded(fd, MAX_PARAMS, &buf, &n) < 0) {
        int saved = errno;
        close(fd);
        return hook_fail(err, path, "cannot read the driver's params: %s", strerror(saved));
    }
    close(fd);
    if (n > MAX_PARAMS) {
        free(buf);
        return hook_fail(err, path, "the driver's params is larger than %d bytes", MAX_PARAMS);
    }
    *data = buf;
    *len = n;
    return 0;
}

/* A copy of params with every `ModifyDeviceFiles: <not 0>` line made `ModifyDeviceFiles: 0`; NULL in
 * *out when no line needed it. -1: out of memory. */
static int without_modification(const char *params, size_t len, char **out, size_t *outlen)
{
    const char *line = params, *end = params + len;
    char *copy = malloc(2 * len + sizeof(KEY) + 4), *w = copy;
    int changed = 0;

    if (copy == NULL)
        return -1;
    while (line < end) {
        const char *eol = memchr(line, '\n', (size_t)(end - line));
        const char *stop = eol ? eol : end, *value = line + strlen(KEY);
        if ((size_t)(stop - line) >= strlen(KEY) && memcmp(line, KEY, strlen(KEY)) == 0) {
            while (value < stop && (*value == ' ' || *value == '\t'))
                value++;
            if (!(stop - value == 1 && *value == '0')) {
                memcpy(w, KEY " 0", strlen(KEY " 0"));
                w += strlen(KEY " 0");
                changed = 1;
                line = stop;
            }
        }
        memcpy(w, line, (size_t)(stop - line));
        w += stop - line;
        if (eol)
            *w++ = '\n';
        line = eol ? eol + 1 : end;
    }
    *outlen = (size_t)(w - copy);
    if (!changed) {
        free(copy);
        copy = NULL;
        *outlen = 0;
    }
    *out = copy;
    return 0;
}

int hook_disable_device_node_modification(int rootfd, const char *rootfs, const char *params_file,
                                          struct hook_error *err)
{
    char *params = NULL, *copy = NULL;
    size_t len = 0, copylen = 0;
    int rc = read_params(params_file, &params, &len, err);

    if (rc != 0)
        return rc < 0 ? -1 : 0;
    if (without_modification(params, len, &copy, &copylen) < 0)
        rc = hook_fail(err, NULL, "out of memory");
    else if (copy && gct_mount_file_over(rootfd, HOOK_PARAMS_PATH, copy, copylen) < 0) {
        if (errno == ELOOP || errno == EISDIR || errno == EINVAL)
            hook_warn("not covering %s: it is not the driver's file", HOOK_PARAMS_PATH);
        else if (errno != ENOENT && errno != ENOTDIR)
            rc = hook_fail(err, rootfs, "cannot cover %s (ModifyDeviceFiles: 0): %s", HOOK_PARAMS_PATH,
                           strerror(errno));
    }
    free(copy);
    free(params);
    return rc;
}

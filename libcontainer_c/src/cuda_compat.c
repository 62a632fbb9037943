/* The CUDA forward-compatibility libraries an image may carry in /usr/local/cuda/compat
 * (libcuda.so.<driver version>, from NVIDIA's cuda-compat package): the driver major version they
 * are for, so that a caller can put that folder first in the ld cache when they are newer than the
 * host's driver. The folder is opened inside the root (gct_openat2_in_root): an image link from it
 * to a host directory is clamped at the root like any other. Names are only read, never followed. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "libcontainer.h"

#define COMPAT_DIR "/usr/local/cuda/compat"
#define COMPAT_PREFIX "libcuda.so."
#define MAX_ENTRIES 65536   /* a folder of the image: its size is the image's choice */
#define MAX_MAJOR_DIGITS 6

const char *gct_cuda_compat_dir(void)
{
    return COMPAT_DIR;
}

/* The major of "libcuda.so.<digits>.<rest>" (NVIDIA's glob libcuda.so.*.*, held to digits before
 * the first dot), else 0: libcuda.so.1, the soname link, is no version. */
static long compat_major(const char *name)
{
    const char *p = name + strlen(COMPAT_PREFIX);
    long major = 0;
    int digits = 0;

    if (strncmp(name, COMPAT_PREFIX, strlen(COMPAT_PREFIX)) != 0)
        return 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (++digits > MAX_MAJOR_DIGITS)
            return 0;
        major = major * 10 + (*p - '0');
    }
    return digits > 0 && *p == '.' ? major : 0;
}

int gct_cuda_compat_major(int rootfd)
{
    struct dirent *entry;
    long found = 0;
    int fd, count = 0, entries = 0, rc = 0;
    DIR *dir;

    fd = gct_openat2_in_root(rootfd, COMPAT_DIR, O_RDONLY | O_DIRECTORY, 0);
    if (fd < 0)
        return errno == ENOENT || errno == ENOTDIR || errno == ELOOP ? 0 : -1;
    dir = fdopendir(fd);
    if (dir == NULL) {
        gct_close_keep_errno(fd);
        return -1;
    }
    errno = 0;
    while ((entry = readdir(dir)) != NULL) {
        long major = compat_major(entry->d_name);
        if (++entries > MAX_ENTRIES) {
            errno = E2BIG;
            rc = -1;
            break;
        }
        if (major > 0 && (entry->d_type == DT_REG || entry->d_type == DT_LNK || entry->d_type == DT_UNKNOWN)) {
            found = major;
            count++;
        }
    }
    if (rc == 0 && errno != 0)
        rc = -1;
    else if (rc == 0 && count > 1) {
        errno = ENOTUNIQ;   /* which one would ld.so take? NVIDIA's hook gives up too */
        rc = -1;
    } else if (rc == 0)
        rc = (int)found;
    {
        int saved = errno;
        closedir(dir);
        errno = saved;
    }
    return rc;
}

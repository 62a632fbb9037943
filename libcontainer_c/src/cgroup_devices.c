/* Device cgroup v1: append a rule to <hierarchy>/<cgroup>/devices.allow. The cgroup path comes from
 * the runtime, but it is still walked with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
 * RESOLVE_NO_XDEV) below an fd of the hierarchy that was checked to be a cgroup v1 filesystem, so no
 * path can make the write land in another file. */
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "internal.h"
#include "libcontainer.h"

static int open_hierarchy(const char *hierarchy)
{
    struct statfs sfs;
    int fd = open(hierarchy, O_PATH | O_DIRECTORY | O_CLOEXEC);

    if (fd < 0)
        return -1;
    if (fstatfs(fd, &sfs) < 0 || sfs.f_type != CGROUP_SUPER_MAGIC) {
        close(fd);
        errno = EXDEV;   /* not a cgroup v1 hierarchy */
        return -1;
    }
    return fd;
}

int gct_cgroup_v1_device_rule(const char *hierarchy, const char *cgroup, const char *file, const char *rule)
{
    int root, dir, fd;
    ssize_t n;
    size_t len = strlen(rule);

    while (*cgroup == '/')   /* RESOLVE_BENEATH refuses absolute paths; the path is below the root */
        cgroup++;
    root = open_hierarchy(hierarchy);
    if (root < 0)
        return -1;
    dir = gct_openat2(root, cgroup, O_PATH | O_DIRECTORY,
                      RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV);
    gct_close_keep_errno(root);
    if (dir < 0)
        return -1;
    fd = gct_openat2(dir, file, O_WRONLY, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV);
    gct_close_keep_errno(dir);
    if (fd < 0)
        return -1;
    /* cgroup files take one rule per write(2) */
    n = write(fd, rule, len);
    if (n >= 0 && (size_t)n != len) {
        n = -1;
        errno = EIO;
    }
    gct_close_keep_errno(fd);
    return n < 0 ? -1 : 0;
}

/* Path resolution inside a root that an attacker controls (the image's rootfs).
 * Every walk goes through openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS): absolute symlinks and ".."
 * are clamped at the root by the kernel, and /proc/<pid>/... magic links are refused outright. */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"
#include "libcontainer.h"

/* glibc 2.36 has no openat2() wrapper. */
static int sys_openat2(int dirfd, const char *path, struct open_how *how)
{
    return (int)syscall(SYS_openat2, dirfd, path, how, sizeof(*how));
}

void gct_close_keep_errno(int fd)
{
    int saved = errno;

    if (fd >= 0)
        close(fd);
    errno = saved;
}

int gct_openat2(int dirfd, const char *path, int oflags, unsigned long long resolve)
{
    struct open_how how;
    int attempt, fd = -1;

    memset(&how, 0, sizeof(how));
    how.flags = (unsigned long long)(oflags | O_CLOEXEC);
    how.resolve = resolve;
    if (path == NULL || path[0] == '\0')
        path = ".";
    for (attempt = 0; attempt < 32; attempt++) {
        fd = sys_openat2(dirfd, path, &how);
        if (fd >= 0 || errno != EAGAIN)
            break;
    }
    return fd;
}

int gct_openat2_in_root(int rootfd, const char *path, int oflags, unsigned long long extra_resolve)
{
    return gct_openat2(rootfd, path, oflags, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | extra_resolve);
}

int gct_open_root(const char *path)
{
    return open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
}

int gct_resolve(int rootfd, const char *path, int oflags)
{
    /* O_CREAT through a resolver would create the last component without the placeholder checks. */
    if (oflags & (O_CREAT | O_TRUNC)) {
        errno = EINVAL;
        return -1;
    }
    return gct_openat2_in_root(rootfd, path, oflags, 0);
}

int gct_split_path(const char *path, char *dir, size_t dirlen, char *name, size_t namelen)
{
    size_t end = strlen(path), start, dirend;

    while (end > 0 && path[end - 1] == '/')
        end--;
    start = end;
    while (start > 0 && path[start - 1] != '/')
        start--;
    if (end == start || (end - start == 1 && path[start] == '.')
        || (end - start == 2 && path[start] == '.' && path[start + 1] == '.')) {
        errno = EINVAL;
        return -1;
    }
    if (end - start >= namelen) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(name, path + start, end - start);
    name[end - start] = '\0';

    dirend = start;
    if (dirend == 0) {
        dir[0] = '.';
        dir[1] = '\0';
        return 0;
    }
    if (dirend >= dirlen) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(dir, path, dirend);
    dir[dirend] = '\0';
    return 0;
}

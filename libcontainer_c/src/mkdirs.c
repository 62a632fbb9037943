/* mkdir -p inside a root. Each missing component is created with mkdirat() on the fd of its parent,
 * and that parent fd always comes from resolving the prefix inside the root again: a symlink in the
 * image is followed the way the container would see it, never out of the root. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "libcontainer.h"

/* Creates name in parentfd (an existing entry of any kind is fine: the resolve that follows decides
 * whether it is a usable directory). */
static int mkdir_component(int parentfd, const char *name, unsigned int mode)
{
    if (mkdirat(parentfd, name, mode) < 0 && errno != EEXIST)
        return -1;
    return 0;
}

int gct_mkdir_p(int rootfd, const char *path, unsigned int mode)
{
    char prefix[PATH_MAX], name[NAME_MAX + 1];
    size_t len, pos = 0, start, n;
    int fd, parent;

    fd = gct_openat2_in_root(rootfd, path, O_PATH | O_DIRECTORY, 0);
    if (fd >= 0 || errno != ENOENT)
        return fd;

    len = strlen(path);
    if (len >= sizeof(prefix)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    parent = gct_openat2_in_root(rootfd, ".", O_PATH | O_DIRECTORY, 0);
    while (parent >= 0) {
        while (pos < len && path[pos] == '/')
            pos++;
        if (pos == len)
            return parent;
        start = pos;
        while (pos < len && path[pos] != '/')
            pos++;
        n = pos - start;
        if (n > NAME_MAX) {
            gct_close_keep_errno(parent);
            errno = ENAMETOOLONG;
            return -1;
        }
        memcpy(name, path + start, n);
        name[n] = '\0';
        if (mkdir_component(parent, name, mode) < 0) {
            gct_close_keep_errno(parent);
            return -1;
        }
        close(parent);
        memcpy(prefix, path, pos);
        prefix[pos] = '\0';
        parent = gct_openat2_in_root(rootfd, prefix, O_PATH | O_DIRECTORY, 0);
    }
    return -1;
}

/* Mounts by file descriptor: a bind source is cloned with open_tree(OPEN_TREE_CLONE) into a detached
 * tree, its flags and propagation are set on that detached tree with mount_setattr() (so the mount is
 * never visible with the wrong flags), and only then is it attached with move_mount() onto the fd of
 * a target resolved inside the root. No path string is walked a second time. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include "internal.h"
#include "libcontainer.h"

_Static_assert(GCT_ATTR_RDONLY == MOUNT_ATTR_RDONLY, "attr values follow the kernel's");
_Static_assert(GCT_ATTR_NOSUID == MOUNT_ATTR_NOSUID, "attr values follow the kernel's");
_Static_assert(GCT_ATTR_NODEV == MOUNT_ATTR_NODEV, "attr values follow the kernel's");
_Static_assert(GCT_ATTR_NOEXEC == MOUNT_ATTR_NOEXEC, "attr values follow the kernel's");

#define GCT_ATTR_ALL (GCT_ATTR_RDONLY | GCT_ATTR_NOSUID | GCT_ATTR_NODEV | GCT_ATTR_NOEXEC)

int gct_clone_tree(int dirfd, const char *path, int recursive)
{
    unsigned int flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC;

    if (recursive)
        flags |= AT_RECURSIVE;
    if (path == NULL || path[0] == '\0') {
        path = "";
        flags |= AT_EMPTY_PATH;
    }
    return open_tree(dirfd, path, flags);
}

int gct_set_tree_attrs(int treefd, unsigned int attr_set, unsigned int attr_clr)
{
    struct mount_attr attr;

    if ((attr_set | attr_clr) & ~GCT_ATTR_ALL || (attr_set & attr_clr)) {
        errno = EINVAL;
        return -1;
    }
    memset(&attr, 0, sizeof(attr));
    attr.attr_set = attr_set;
    attr.attr_clr = attr_clr;
    /* Private, recursively: nothing mounted later under this tree propagates anywhere else. */
    attr.propagation = MS_PRIVATE;
    return mount_setattr(treefd, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof(attr));
}

int gct_attach_tree(int rootfd, int treefd, int targetfd)
{
    int shared = gct_on_shared_mount(targetfd, rootfd);

    if (shared != 0) {
        if (shared > 0)
            errno = EXDEV;   /* the attach would propagate to the mount's peers, e.g. the host */
        return -1;
    }
    return move_mount(treefd, "", targetfd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH);
}

int gct_bind_tree(int rootfd, int treefd, int targetfd, unsigned int attr_set, unsigned int attr_clr)
{
    if (gct_set_tree_attrs(treefd, attr_set, attr_clr) < 0)
        return -1;
    return gct_attach_tree(rootfd, treefd, targetfd);
}

int gct_umount_fd(int mountfd)
{
    char path[64];

    /* umount2() takes a path only; the fd's magic link names exactly the mount the fd holds (its root),
     * which a path inside the container could not name reliably once something is mounted over it. */
    snprintf(path, sizeof(path), "/proc/self/fd/%d", mountfd);
    return umount2(path, MNT_DETACH);
}

/* Applies "key=value,flag,..." to a filesystem context; values must not contain commas. */
static int configure_fs(int fsfd, const char *options)
{
    char buf[256], *save = NULL, *item, *eq;

    if (options == NULL)
        return 0;
    if (strlen(options) >= sizeof(buf)) {
        errno = E2BIG;
        return -1;
    }
    strcpy(buf, options);
    for (item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        eq = strchr(item, '=');
        if (eq) {
            *eq = '\0';
            if (fsconfig(fsfd, FSCONFIG_SET_STRING, item, eq + 1, 0) < 0)
                return -1;
        } else if (fsconfig(fsfd, FSCONFIG_SET_FLAG, item, NULL, 0) < 0) {
            return -1;
        }
    }
    return 0;
}

int gct_new_tmpfs(const char *options, unsigned int attr_set)
{
    int fsfd, mntfd = -1;

    if (attr_set & ~GCT_ATTR_ALL) {
        errno = EINVAL;
        return -1;
    }
    fsfd = fsopen("tmpfs", FSOPEN_CLOEXEC);
    if (fsfd < 0)
        return -1;
    if (configure_fs(fsfd, options) == 0 && fsconfig(fsfd, FSCONFIG_CMD_CREATE, NULL, NULL, 0) == 0)
        mntfd = fsmount(fsfd, FSMOUNT_CLOEXEC, attr_set);
    gct_close_keep_errno(fsfd);
    return mntfd;
}

int gct_mount_tmpfs(int rootfd, int targetfd, const char *options, unsigned int attr_set)
{
    int mntfd = gct_new_tmpfs(options, attr_set);

    if (mntfd < 0)
        return -1;
    if (gct_attach_tree(rootfd, mntfd, targetfd) < 0) {
        gct_close_keep_errno(mntfd);
        return -1;
    }
    return mntfd;
}

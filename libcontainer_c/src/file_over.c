/* A file of our own, mounted read-only over a regular file inside the root: the driver's
 * /proc/driver/nvidia/params with ModifyDeviceFiles: 0, so that the CUDA library in the container
 * does not try to create device nodes itself.
 *
 * The file lives on a small tmpfs of its own. A bind mount of a file needs a mount the kernel lets
 * us clone (one in our mount namespace: before Linux 6.15 a detached fsmount() tree cannot be
 * cloned), so the tmpfs is attached for a moment over the target's own folder, the file is written
 * and cloned from it, and the tmpfs is detached again: nothing stays visible but the file over the
 * target. The target is resolved inside the root (last component not followed) before anything is
 * mounted, and must be a regular file: ELOOP for a symlink, EISDIR for a directory, EINVAL for
 * anything else, ENOENT when it is not there. The mount gets ro,nosuid,nodev,noexec, private. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "libcontainer.h"

#define FILE_ATTRS (GCT_ATTR_RDONLY | GCT_ATTR_NOSUID | GCT_ATTR_NODEV | GCT_ATTR_NOEXEC)

static int open_target(int dirfd, const char *name)
{
    struct stat st;
    int fd = openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);

    if (fd < 0)
        return -1;
    if (fstat(fd, &st) < 0) {
        gct_close_keep_errno(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        errno = S_ISLNK(st.st_mode) ? ELOOP : S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
        return -1;
    }
    return fd;
}

static int write_all(int fd, const char *data, unsigned long len)
{
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        data += n;
        len -= (unsigned long)n;
    }
    return 0;
}

/* The file on a tmpfs attached over dirfd for the moment; returns a detached clone of it. */
static int file_tree(int rootfd, int dirfd, const char *name, const char *data, unsigned long len)
{
    char options[64];
    int mntfd, fd, tree = -1;

    snprintf(options, sizeof(options), "size=%lu,mode=0755", len + 4096);
    mntfd = gct_mount_tmpfs(rootfd, dirfd, options, GCT_ATTR_NOSUID | GCT_ATTR_NODEV | GCT_ATTR_NOEXEC);
    if (mntfd < 0)
        return -1;
    fd = openat(mntfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0444);
    if (fd >= 0) {
        int written = fchmod(fd, 0444) == 0 && write_all(fd, data, len) == 0;   /* 0444 whatever the umask */
        gct_close_keep_errno(fd);
        if (written)
            tree = gct_clone_tree(mntfd, name, 0);
    }
    if (gct_umount_fd(mntfd) < 0 && tree >= 0) {   /* the folder must not stay covered */
        gct_close_keep_errno(tree);
        tree = -1;
    }
    gct_close_keep_errno(mntfd);
    return tree;
}

int gct_mount_file_over(int rootfd, const char *path, const char *data, unsigned long len)
{
    char dir[PATH_MAX], name[NAME_MAX + 1];
    int dirfd, target = -1, tree = -1, rc = -1;

    if (gct_split_path(path, dir, sizeof(dir), name, sizeof(name)) < 0)
        return -1;
    dirfd = gct_openat2_in_root(rootfd, dir, O_PATH | O_DIRECTORY, 0);
    if (dirfd < 0)
        return -1;
    target = open_target(dirfd, name);
    if (target >= 0)
        tree = file_tree(rootfd, dirfd, name, data, len);
    if (tree >= 0)
        rc = gct_bind_tree(rootfd, tree, target, FILE_ATTRS, 0);
    gct_close_keep_errno(tree);
    gct_close_keep_errno(target);
    gct_close_keep_errno(dirfd);
    return rc;
}

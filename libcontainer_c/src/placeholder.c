/* Placeholders: the file or directory a bind mount lands on. The last component is never followed
 * (O_NOFOLLOW, O_EXCL): a symlink there is an error, not something to resolve, so an image cannot
 * redirect where a mount or an empty file ends up. Parents are created with gct_mkdir_p. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "internal.h"
#include "libcontainer.h"

/* Turns the kind of an unexpected existing entry into the errno the caller reports. */
static int errno_for_kind(mode_t m, int want_dir)
{
    if (S_ISLNK(m))
        return ELOOP;
    if (want_dir)
        return ENOTDIR;
    if (S_ISDIR(m))
        return EISDIR;
    return EEXIST;   /* device, fifo, socket where a regular file is wanted */
}

/* Checks that fd is what we want; closes it and fails otherwise. */
static int check_kind(int fd, int want_dir)
{
    struct stat st;

    if (fstat(fd, &st) < 0) {
        gct_close_keep_errno(fd);
        return -1;
    }
    if (want_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode))
        return fd;
    close(fd);
    errno = errno_for_kind(st.st_mode, want_dir);
    return -1;
}

/* Opens the parent directory of path inside the root (creating it) and splits off the last name. */
static int open_parent(int rootfd, const char *path, char *name, size_t namelen, unsigned int dirmode)
{
    char dir[PATH_MAX];

    if (gct_split_path(path, dir, sizeof(dir), name, namelen) < 0)
        return -1;
    return gct_mkdir_p(rootfd, dir, dirmode);
}

int gct_placeholder_file(int rootfd, const char *path, unsigned int mode)
{
    char name[NAME_MAX + 1];
    int parent, fd;

    parent = open_parent(rootfd, path, name, sizeof(name), 0755);
    if (parent < 0)
        return -1;
    /* O_RDONLY|O_CREAT creates without asking for write access to the new file. */
    fd = openat(parent, name, O_RDONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd < 0 && errno == EEXIST)
        fd = openat(parent, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    gct_close_keep_errno(parent);
    if (fd < 0)
        return -1;
    return check_kind(fd, 0);
}

/* The procfs fd directory of this process, checked to be procfs (a linkat through a look-alike
 * could link any file it names); -1 when there is none, which only costs the shared placeholder. */
static int proc_fd_dir(void)
{
    struct statfs sfs;
    int fd = open("/proc/self/fd", O_PATH | O_DIRECTORY | O_CLOEXEC);

    if (fd < 0)
        return -1;
    if (fstatfs(fd, &sfs) < 0 || sfs.f_type != PROC_SUPER_MAGIC) {
        close(fd);
        return -1;
    }
    return fd;
}

/* name in parent as a new hard link of the shared placeholder (its fd: src->fd), through the fd's
 * magic link: src->fd stays the empty file it was made as even after a mount covers that name.
 * Returns an O_PATH fd of the new name, checked to be that same inode; -1 with errno from linkat
 * (EEXIST: something is there already) or with EXDEV when the result is not the placeholder. */
static int link_shared(struct gct_shared_placeholder *src, int parent, const char *name)
{
    struct stat want, got;
    char fdname[16];
    int fd;

    snprintf(fdname, sizeof(fdname), "%d", src->fd);
    if (linkat(src->proc_fd_dir, fdname, parent, name, AT_SYMLINK_FOLLOW) < 0)
        return -1;
    fd = openat(parent, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    if (fstat(fd, &got) < 0 || fstat(src->fd, &want) < 0) {
        gct_close_keep_errno(fd);
        return -1;
    }
    if (got.st_dev != want.st_dev || got.st_ino != want.st_ino || !S_ISREG(got.st_mode)) {
        close(fd);
        unlinkat(parent, name, 0);   /* never leave a link to anything but our own placeholder */
        errno = EXDEV;
        return -1;
    }
    return fd;
}

void gct_shared_placeholder_init(struct gct_shared_placeholder *src)
{
    src->fd = -1;
    src->proc_fd_dir = -2;   /* not looked for yet */
}

void gct_shared_placeholder_close(struct gct_shared_placeholder *src)
{
    if (src->fd >= 0)
        close(src->fd);
    if (src->proc_fd_dir >= 0)
        close(src->proc_fd_dir);
    gct_shared_placeholder_init(src);
}

int gct_placeholder_file_shared(int rootfd, const char *path, unsigned int mode,
                                struct gct_shared_placeholder *src)
{
    char name[NAME_MAX + 1];
    int parent, fd, keep;

    parent = open_parent(rootfd, path, name, sizeof(name), 0755);
    if (parent < 0)
        return -1;
    if (src->fd >= 0 && src->mode == mode) {
        if (src->proc_fd_dir == -2)
            src->proc_fd_dir = proc_fd_dir();
        /* errno only from linkat: mkdir_p may have left a harmless EEXIST in it */
        errno = ENOENT;
        fd = src->proc_fd_dir >= 0 ? link_shared(src, parent, name) : -1;
        if (fd >= 0 || errno == EEXIST) {
            if (fd < 0)   /* an entry of the image's: used as gct_placeholder_file uses it */
                fd = openat(parent, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
            gct_close_keep_errno(parent);
            return fd < 0 ? -1 : check_kind(fd, 0);
        }
        /* any other failure (another file system: EXDEV, EMLINK, EPERM, no procfs): a new file below,
         * which becomes the placeholder later targets share */
    }
    fd = openat(parent, name, O_RDONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd >= 0) {
        keep = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        if (keep >= 0) {
            if (src->fd >= 0)
                close(src->fd);
            src->fd = keep;
            src->mode = mode;
        }
    } else if (errno == EEXIST) {
        fd = openat(parent, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    }
    gct_close_keep_errno(parent);
    if (fd < 0)
        return -1;
    return check_kind(fd, 0);
}

int gct_placeholder_dir(int rootfd, const char *path, unsigned int mode)
{
    char name[NAME_MAX + 1];
    int parent, fd;

    parent = open_parent(rootfd, path, name, sizeof(name), 0755);
    if (parent < 0)
        return -1;
    if (mkdirat(parent, name, mode) < 0 && errno != EEXIST) {
        gct_close_keep_errno(parent);
        return -1;
    }
    /* No O_DIRECTORY: with O_NOFOLLOW it would hide a symlink behind ENOTDIR; check_kind tells them apart. */
    fd = openat(parent, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    gct_close_keep_errno(parent);
    if (fd < 0)
        return -1;
    return check_kind(fd, 1);
}

int gct_write_new_file(int rootfd, const char *path, const char *data, unsigned long len, unsigned int mode)
{
    char name[NAME_MAX + 1];
    int parent, fd;
    ssize_t n;

    parent = open_parent(rootfd, path, name, sizeof(name), 0755);
    if (parent < 0)
        return -1;
    fd = openat(parent, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    gct_close_keep_errno(parent);
    if (fd < 0)
        return -1;
    while (len > 0) {
        n = write(fd, data, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = EIO;
            gct_close_keep_errno(fd);
            return -1;
        }
        data += n;
        len -= (size_t)n;
    }
    return close(fd);
}

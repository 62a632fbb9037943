/* Placeholders: the file or directory a bind mount lands on. The last component is never followed
 * (O_NOFOLLOW, O_EXCL): a symlink there is an error, not something to resolve, so an image cannot
 * redirect where a mount or an empty file ends up. Parents are created with gct_mkdir_p. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
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

/* A file of ours in a directory of the root (the ld.so.conf.d drop-in, the ld.so.cache the sandboxed
 * ldconfig built): written under a fresh name in the directory fd and renamed over the final name, so
 * nothing the image put there (a symlink, a hard link to a host file, a FIFO) is ever opened for
 * writing or written through. A file that already is exactly what this would leave is left alone: a
 * restarted container reuses its rootfs, and a create and a rename cost a metadata write each. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "libcontainer.h"

static unsigned int tmp_counter;

static int write_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = EIO;
            return -1;
        }
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/* 1 when dirfd/name is what gct_replace_file would leave (a regular file of our uid and gid, of that
 * mode, no other link to it, holding data), else 0: anything unusual is simply written again. The
 * entry is opened O_PATH without following it and checked before it is read (through /proc/self/fd,
 * the same inode): a FIFO or a device node the image put there is never opened. */
static int is_current(int dirfd, const char *name, const char *data, size_t len, unsigned int mode)
{
    char proc[64], *buf = NULL;
    struct stat st, rst;
    int fd, rfd = -1, same = 0;
    ssize_t n;

    fd = openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return 0;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (st.st_mode & 07777) != mode || st.st_nlink != 1
        || st.st_uid != geteuid() || st.st_gid != getegid() || st.st_size != (off_t)len)
        goto out;
    snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
    rfd = open(proc, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (rfd < 0 || fstat(rfd, &rst) < 0 || rst.st_dev != st.st_dev || rst.st_ino != st.st_ino)
        goto out;
    buf = malloc(len + 1);
    if (buf == NULL)
        goto out;
    n = pread(rfd, buf, len + 1, 0);   /* one byte more: a file grown meanwhile is not the same */
    same = n == (ssize_t)len && memcmp(buf, data, len) == 0;
out:
    free(buf);
    if (rfd >= 0)
        close(rfd);
    close(fd);
    return same;
}

/* A new file (O_EXCL) under a temporary name ".<name>.<pid>-<n>" in dirfd; the name goes to tmp. An
 * entry of that name planted by the image makes us pick another one. */
static int create_temp(int dirfd, const char *name, char *tmp, size_t len)
{
    for (int attempt = 0; attempt < 16; attempt++) {
        if ((size_t)snprintf(tmp, len, ".%s.%d-%u", name, (int)getpid(), tmp_counter++) >= len) {
            errno = ENAMETOOLONG;
            return -1;
        }
        int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    return -1;
}

int gct_replace_file(int dirfd, const char *name, const char *data, unsigned long len, unsigned int mode, int sync)
{
    char tmp[300];
    int fd, rc;

    if (is_current(dirfd, name, data, len, mode))
        return 0;
    fd = create_temp(dirfd, name, tmp, sizeof(tmp));
    if (fd < 0)
        return -1;
    /* the mode is set exactly, not through our umask */
    rc = fchmod(fd, mode) < 0 || write_all(fd, data, len) < 0 || (sync && fsync(fd) < 0) ? -1 : 0;
    if (close(fd) < 0)
        rc = -1;
    /* rename(2) replaces a file or a link there, and refuses a directory (EISDIR) */
    if (rc == 0)
        rc = renameat(dirfd, tmp, dirfd, name);
    if (rc < 0) {
        int saved = errno;
        unlinkat(dirfd, tmp, 0);
        errno = saved;
    }
    return rc;
}

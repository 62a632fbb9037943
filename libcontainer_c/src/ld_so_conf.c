/* The ld.so.conf.d drop-in that lists the driver's library folders, so that an ldconfig the container
 * runs later (a package install) keeps the libraries in its cache.
 *
 * The directory is resolved (and created) inside the root; the file is written under a fresh name in
 * that directory fd and renamed over the final name, so nothing the image put there (a symlink, a
 * hard link to a host file, a FIFO) is ever opened or written through. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "libcontainer.h"

#define CONF_DIR "/etc/ld.so.conf.d"
#define CONF_NAME "00-nvidia-cdi-hook.conf"   /* 00: read before the image's own folders */
#define CONF_HEADER "# driver library folders, written by nvidia-cdi-hook\n"

static unsigned int tmp_counter;

const char *gct_ld_so_conf_path(void)
{
    return CONF_DIR "/" CONF_NAME;
}

/* A folder becomes one line: a newline in it would smuggle a second line (an `include`) in. */
static int check_folders(const char *const *folders, unsigned long n)
{
    for (unsigned long i = 0; i < n; i++) {
        if (folders[i] == NULL || folders[i][0] != '/' || strchr(folders[i], '\n')) {
            errno = EINVAL;
            return -1;
        }
    }
    return 0;
}

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

/* A new file (O_EXCL) under a temporary name in dirfd; the name goes to tmp. An entry of that name
 * planted by the image makes us pick another one. */
static int create_temp(int dirfd, char *tmp, size_t len)
{
    for (int attempt = 0; attempt < 16; attempt++) {
        snprintf(tmp, len, "." CONF_NAME ".%d-%u", (int)getpid(), tmp_counter++);
        int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    return -1;
}

/* The content, written to fd: the header, then one folder a line. The mode is set exactly (not
 * through our umask): every process of the container must be able to read it. */
static int write_content(int fd, const char *const *folders, unsigned long n)
{
    if (fchmod(fd, 0644) < 0 || write_all(fd, CONF_HEADER, strlen(CONF_HEADER)) < 0)
        return -1;
    for (unsigned long i = 0; i < n; i++)
        if (write_all(fd, folders[i], strlen(folders[i])) < 0 || write_all(fd, "\n", 1) < 0)
            return -1;
    return 0;
}

int gct_write_ld_so_conf(int rootfd, const char *const *folders, unsigned long nfolders)
{
    char tmp[64];
    int dirfd, fd, rc = -1;

    if (check_folders(folders, nfolders) < 0)
        return -1;
    dirfd = gct_mkdir_p(rootfd, CONF_DIR, 0755);
    if (dirfd < 0)
        return -1;
    fd = create_temp(dirfd, tmp, sizeof(tmp));
    if (fd < 0)
        goto out;
    rc = write_content(fd, folders, nfolders);
    if (close(fd) < 0)
        rc = -1;
    /* rename(2) replaces a file or a link there, and refuses a directory (EISDIR) */
    if (rc == 0)
        rc = renameat(dirfd, tmp, dirfd, CONF_NAME);
    if (rc < 0) {
        int saved = errno;
        unlinkat(dirfd, tmp, 0);
        errno = saved;
    }
out:
    gct_close_keep_errno(dirfd);
    return rc;
}

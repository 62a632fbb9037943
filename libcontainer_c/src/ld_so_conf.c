/* The ld.so.conf.d drop-in that lists the driver's library folders, so that an ldconfig the container
 * runs later (a package install) keeps the libraries in its cache.
 *
 * The directory is resolved (and created) inside the root; the file is written under a fresh name in
 * that directory fd and renamed over the final name, so nothing the image put there (a symlink, a
 * hard link to a host file, a FIFO) is ever opened or written through. A drop-in that already says
 * exactly this, as a file of ours (a restarted container reuses its rootfs), is left as it is: a create
 * and a rename saved on every start. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
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

/* The content: the header, then one folder a line; malloc'd, its length in *len. */
static char *make_content(const char *const *folders, unsigned long n, size_t *len)
{
    size_t size = strlen(CONF_HEADER) + 1;
    char *content, *w;

    for (unsigned long i = 0; i < n; i++)
        size += strlen(folders[i]) + 1;
    content = malloc(size);
    if (content == NULL)
        return NULL;
    w = content + strlen(strcpy(content, CONF_HEADER));
    for (unsigned long i = 0; i < n; i++) {
        size_t flen = strlen(folders[i]);
        memcpy(w, folders[i], flen);
        w += flen;
        *w++ = '\n';
    }
    *len = (size_t)(w - content);
    return content;
}

/* 1 when dirfd/CONF_NAME is what writing it again would leave (a regular file of our uid and gid,
 * mode 0644, no other link to it, holding content), else 0: anything unusual is simply written again.
 * The entry is opened O_PATH without following it and checked before it is read (through
 * /proc/self/fd, the same inode): a FIFO or a device node the image put there is never opened. */
static int is_current(int dirfd, const char *content, size_t len)
{
    char proc[64], *buf = NULL;
    struct stat st, rst;
    int fd, rfd = -1, same = 0;
    ssize_t n;

    fd = openat(dirfd, CONF_NAME, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return 0;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (st.st_mode & 07777) != 0644 || st.st_nlink != 1
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
    same = n == (ssize_t)len && memcmp(buf, content, len) == 0;
out:
    free(buf);
    if (rfd >= 0)
        close(rfd);
    close(fd);
    return same;
}

int gct_write_ld_so_conf(int rootfd, const char *const *folders, unsigned long nfolders)
{
    char tmp[64], *content;
    size_t len;
    int dirfd, fd, rc = -1;

    if (check_folders(folders, nfolders) < 0)
        return -1;
    content = make_content(folders, nfolders, &len);
    if (content == NULL)
        return -1;
    dirfd = gct_mkdir_p(rootfd, CONF_DIR, 0755);
    if (dirfd < 0)
        goto out_free;
    if (is_current(dirfd, content, len)) {
        rc = 0;
        goto out;
    }
    fd = create_temp(dirfd, tmp, sizeof(tmp));
    if (fd < 0)
        goto out;
    /* the mode is set exactly (not through our umask): every process of the container must be able
     * to read it */
    rc = fchmod(fd, 0644) < 0 || write_all(fd, content, len) < 0 ? -1 : 0;
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
out_free:
    {
        int saved = errno;
        free(content);
        errno = saved;
    }
    return rc;
}

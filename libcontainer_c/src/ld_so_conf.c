/* The ld.so.conf.d drop-in that lists the driver's library folders, so that an ldconfig the container
 * runs later (a package install) keeps the libraries in its cache.
 *
 * The directory is resolved (and created) inside the root; the file is put there by gct_replace_file
 * (file_replace.c): written under a fresh name and renamed over the final name, so nothing the image
 * put there (a symlink, a hard link to a host file, a FIFO) is ever written through, and left as it
 * is when it already says exactly this (a restarted container reuses its rootfs). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "libcontainer.h"

#define CONF_DIR "/etc/ld.so.conf.d"
#define CONF_NAME "00-nvidia-cdi-hook.conf"   /* 00: read before the image's own folders */
#define CONF_HEADER "# driver library folders, written by nvidia-cdi-hook\n"

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

int gct_write_ld_so_conf(int rootfd, const char *const *folders, unsigned long nfolders)
{
    char *content;
    size_t len;
    int dirfd, saved, rc = -1;

    if (check_folders(folders, nfolders) < 0)
        return -1;
    content = make_content(folders, nfolders, &len);
    if (content == NULL)
        return -1;
    dirfd = gct_mkdir_p(rootfd, CONF_DIR, 0755);
    /* mode 0644 whatever our umask: every process of the container must be able to read it */
    if (dirfd >= 0)
        rc = gct_replace_file(dirfd, CONF_NAME, content, len, 0644, 0);
    gct_close_keep_errno(dirfd);
    saved = errno;
    free(content);
    errno = saved;
    return rc;
}

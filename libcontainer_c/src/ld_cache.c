/* A container's /etc/ld.so.cache rebuilt by the host's ldconfig through the one sandboxed runner
 * (gct_sandbox_run), for nvidia-cdi-hook and the prestart hook alike.
 *
 * ldconfig rewrites and fsyncs its cache on every run, changed or not, and a restarted container
 * reuses its rootfs: so when the root has a /proc directory (runtimes make one) ldconfig writes the
 * cache (-C) on a scratch tmpfs the sandbox puts there, and it is put in the root's /etc with
 * gct_replace_file (a fresh file renamed into place) unless that already is the same file, byte
 * for byte. The image's own entries are refreshed at every start all the same. It is not fsync'd
 * (ldconfig fsyncs its own): on a fresh rootfs the cache always differs from the image's, and an
 * fsync there cost ~4 ms (up to ~14 ms) of every new GPU container's start on our disk; what it
 * would keep is made again at the container's next start, which rewrites a cache that is not this
 * one (also one a crash left short), before anything in the container runs. The rename keeps a
 * reader from ever seeing a part-written file. The
 * sandboxed program may have been subverted by the image's files: what it left is read only when it
 * is a regular file (not followed, opened O_NONBLOCK) no larger than the sandbox let it write.
 * Without a /proc directory ldconfig writes /etc/ld.so.cache itself, as it does on its own. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "libcontainer.h"

#define CACHE_NAME "ld.so.cache"
#define CACHE_PATH "/etc/" CACHE_NAME
#define SCRATCH_CACHE "/proc/" CACHE_NAME   /* ldconfig -C, in the sandbox: the scratch tmpfs is its /proc */

/* A tmpfs for ldconfig to write its cache on when the root has a /proc directory to put it on (the
 * sandbox's rule, gct_sandbox_proc_dir), else -1. */
static int open_scratch(int rootfd)
{
    char options[64];
    int proc = gct_sandbox_proc_dir(rootfd);

    if (proc < 0)
        return -1;
    close(proc);
    /* a fresh tmpfs: ldconfig's "<cache>~" is renamed to a name that is not there yet, so one file of
     * the sandbox's file size limit at a time. Root's, where ldconfig runs as root without capabilities:
     * a tmpfs belongs to its mounter's fsuid, which in a container with a user namespace is that
     * namespace's root (gct_create_files_as) */
    snprintf(options, sizeof(options), "size=%lu,nr_inodes=8,mode=0755,uid=0,gid=0",
             (unsigned long)GCT_LDCONFIG_FILE_SIZE);
    return gct_new_tmpfs(options, GCT_ATTR_NOSUID | GCT_ATTR_NODEV | GCT_ATTR_NOEXEC);
}

/* The cache ldconfig wrote on the scratch tmpfs (malloc'd into *data): a regular file, not followed,
 * no larger than the sandbox let it write (EINVAL otherwise, also for one that grew after the fstat). */
static int read_cache(int scratch, char **data, size_t *len)
{
    struct stat st;
    int fd = openat(scratch, CACHE_NAME, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

    if (fd < 0)
        return -1;
    int ok = fstat(fd, &st) == 0;
    if (ok && (!S_ISREG(st.st_mode) || st.st_size > GCT_LDCONFIG_FILE_SIZE)) {
        errno = EINVAL;
        ok = 0;
    }
    ok = ok && gct_read_bounded(fd, (size_t)st.st_size, data, len) == 0;
    if (ok && *len > (size_t)st.st_size) {
        free(*data);
        errno = EINVAL;
        ok = 0;
    }
    gct_close_keep_errno(fd);
    return ok ? 0 : -1;
}

/* A failed step of ours after ldconfig ran: its name and the file it was about go to res. */
static int failed(struct gct_sandbox_result *res, const char *stage, const char *path)
{
    res->err = errno;
    snprintf(res->stage, sizeof(res->stage), "%s", stage);
    res->path = path;
    return -1;
}

/* The cache ldconfig built, into the root's /etc unless the same file is there already. */
static int install_cache(int rootfd, int scratch, struct gct_sandbox_result *res)
{
    char *data = NULL;
    size_t len = 0;
    int etc, rc = -1;

    if (read_cache(scratch, &data, &len) < 0)
        return failed(res, "read the cache it built", SCRATCH_CACHE);
    etc = gct_resolve(rootfd, "/etc", O_PATH | O_DIRECTORY);
    if (etc >= 0)
        rc = gct_replace_file(etc, CACHE_NAME, data, len, 0644, 0);   /* no fsync: see the top */
    if (rc < 0)
        failed(res, "write the cache", CACHE_PATH);
    gct_close_keep_errno(etc);
    free(data);
    errno = res->err;
    return rc;
}

int gct_update_ld_cache(int rootfd, const struct gct_sandbox *sb, char *output, unsigned long output_size,
                        struct gct_sandbox_result *res)
{
    struct gct_sandbox run = *sb;
    size_t argc = 0, n = 1;
    int scratch, rc, saved;

    memset(res, 0, sizeof(*res));
    while (sb->argv != NULL && sb->argv[argc] != NULL)
        argc++;
    if (argc == 0) {
        errno = EINVAL;
        return -1;
    }
    run.argv = calloc(argc + 3, sizeof(*run.argv));
    if (run.argv == NULL)
        return -1;
    run.argv[0] = sb->argv[0];
    scratch = open_scratch(rootfd);
    if (scratch >= 0) {
        run.argv[n++] = "-C";
        run.argv[n++] = SCRATCH_CACHE;
    }
    memcpy(run.argv + n, sb->argv + 1, (argc - 1) * sizeof(*run.argv));
    rc = gct_sandbox_run(&run, scratch, output, output_size, res);
    if (rc == 0 && scratch >= 0 && WIFEXITED(res->status) && WEXITSTATUS(res->status) == 0)
        rc = install_cache(rootfd, scratch, res);
    saved = errno;
    if (scratch >= 0)
        close(scratch);
    free(run.argv);
    errno = saved;
    return rc;
}

/* The host's ldconfig for the container, through libcontainer_c's one runner: the binary is opened
 * here and must be static (gct_open_static_executable), then runs in the sandbox (gct_sandbox_exec:
 * private mount namespace, nodev/nosuid/noexec copy of the rootfs, chroot, no capabilities,
 * no_new_privs, empty environment, the limits of libcontainer.h). Failures read as
 * libcontainer_c.ldconfig's LdconfigError words them, after "ldconfig failed: ".
 *
 * ldconfig rewrites and fsyncs its cache on every run, changed or not, and a restarted container
 * reuses its rootfs: so ldconfig writes the cache (-C) on a scratch tmpfs the sandbox puts over the
 * root's /proc, and the hook puts it in /etc/ld.so.cache (gct_replace_file: a fresh file, fsync'd,
 * renamed into place) unless that already is the same file, byte for byte. A root without a /proc
 * directory gets ldconfig's own write. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cdi_hook.h"
#include "libcontainer.h"

#define SCRATCH_DIR "proc"                /* in the root: where the sandbox puts the scratch tmpfs */
#define CACHE_NAME "ld.so.cache"
#define CACHE_PATH "/etc/" CACHE_NAME
#define SCRATCH_CACHE "/" SCRATCH_DIR "/" CACHE_NAME   /* ldconfig -C, in the sandbox */

/* "open ldconfig: [Errno 2] ...: '/x'", "refusing ldconfig: it is a script, ...: [Errno 8] ...: '/x'" */
static int fail_open(struct hook_error *err, const char *rootfs, const struct gct_exe_check *check, int errnum)
{
    char *os = hook_oserror(errnum, check->path);

    if (check->problem == GCT_EXE_NOT_OPENED)
        hook_fail(err, rootfs, "ldconfig failed: open ldconfig: %s", os ? os : "");
    else
        hook_fail(err, rootfs, "ldconfig failed: refusing ldconfig: %s: %s", gct_exe_problem_text(check->problem),
                  os ? os : "");
    free(os);
    return -1;
}

static int is_line_break(char c)
{
    return c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e);
}

/* The last non-blank line of ldconfig's output (in place), with what is not printable shown as '?'
 * (hook_make_printable): the output may name files of the image, and the error stays one plain line. */
static const char *last_line(char *out, size_t len)
{
    char *line;

    while (len > 0 && (is_line_break(out[len - 1]) || out[len - 1] == ' ' || out[len - 1] == '\t'))
        len--;
    out[len] = '\0';
    line = out + len;
    while (line > out && !is_line_break(line[-1]))
        line--;
    while (*line == ' ' || *line == '\t')
        line++;
    hook_make_printable(line);
    return line;
}

/* The exit status as Python's subprocess gives it: negative for a signal. */
static int returncode(int status)
{
    return WIFSIGNALED(status) ? -WTERMSIG(status) : WEXITSTATUS(status);
}

/* "(exit status 1: <last line>)" of a run that did not succeed */
static int fail_run(struct hook_error *err, const char *rootfs, const char *what, int errnum, int status,
                    char *output, size_t len)
{
    char *os = hook_oserror(errnum, rootfs);
    const char *line = last_line(output, len);

    hook_fail(err, rootfs, "ldconfig failed: %s: %s (exit status %d%s%s)", what, os ? os : "", returncode(status),
              line[0] ? ": " : "", line);
    free(os);
    return -1;
}

static int run(int exe_fd, int scratch, const char *rootfs, char **argv, char *output, struct hook_error *err)
{
    struct gct_sandbox sb = {
        .exe_fd = exe_fd, .mntns_fd = -1, .root_path = rootfs, .argv = argv, .scratch_fd = scratch,
        .limits = { GCT_LDCONFIG_CPU_SECONDS, GCT_LDCONFIG_ADDRESS_SPACE, GCT_LDCONFIG_OPEN_FILES,
                    GCT_LDCONFIG_FILE_SIZE },
        .timeout_ms = GCT_LDCONFIG_TIMEOUT_MS,
    };
    struct gct_sandbox_result res;
    char what[64], *os;
    int errnum;

    if (gct_sandbox_exec(&sb, output, GCT_LDCONFIG_OUTPUT_LIMIT, &res) == 0) {
        if (returncode(res.status) == 0)
            return 0;
        return fail_run(err, rootfs, "ldconfig", EIO, res.status, output, res.output_len);
    }
    errnum = errno;
    if (res.timed_out) {
        snprintf(what, sizeof(what), "ldconfig timed out after %gs", GCT_LDCONFIG_TIMEOUT_MS / 1000.0);
        return fail_run(err, rootfs, what, errnum, res.status, output, res.output_len);
    }
    os = hook_oserror(errnum, rootfs);
    hook_fail(err, rootfs, "ldconfig failed: %s: %s", res.stage[0] ? res.stage : "start ldconfig", os ? os : "");
    free(os);
    return -1;
}

/* A tmpfs for ldconfig to write its cache on when the root has a /proc directory (not a symlink) to
 * put it on, else -1: then ldconfig writes /etc/ld.so.cache itself, as it does on its own. */
static int open_scratch(int rootfd)
{
    char options[64];
    struct stat st;

    if (fstatat(rootfd, SCRATCH_DIR, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode))
        return -1;
    /* a fresh tmpfs: ldconfig's "<cache>~" is renamed to a name that is not there yet, so one file of
     * the sandbox's file size limit at a time */
    snprintf(options, sizeof(options), "size=%lu,nr_inodes=8,mode=0755", (unsigned long)GCT_LDCONFIG_FILE_SIZE);
    return gct_new_tmpfs(options, GCT_ATTR_NOSUID | GCT_ATTR_NODEV | GCT_ATTR_NOEXEC);
}

/* The cache ldconfig wrote on the scratch tmpfs (malloc'd into *data): a regular file, not followed,
 * no larger than the sandbox let it write. */
static int read_cache(int scratch, char **data, size_t *len)
{
    struct stat st;
    int fd = openat(scratch, CACHE_NAME, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC), ok, saved;

    if (fd < 0)
        return -1;
    ok = fstat(fd, &st) == 0;
    if (ok && (!S_ISREG(st.st_mode) || st.st_size > GCT_LDCONFIG_FILE_SIZE)) {
        errno = EINVAL;
        ok = 0;
    }
    if (ok)
        ok = hook_read_bounded(fd, GCT_LDCONFIG_FILE_SIZE, data, len) == 0;
    saved = errno;
    close(fd);
    if (ok && *len > GCT_LDCONFIG_FILE_SIZE) {   /* grew after the fstat */
        free(*data);
        *data = NULL;
        saved = EINVAL;
        ok = 0;
    }
    errno = saved;
    return ok ? 0 : -1;
}

/* The cache ldconfig built, into the root's /etc unless the same file is there already. */
static int install_cache(int rootfd, int scratch, const char *rootfs, struct hook_error *err)
{
    const char *what = "read the cache it built", *path = SCRATCH_CACHE;
    char *data = NULL, *os;
    size_t len = 0;
    int etc = -1, rc = -1, errnum;

    if (read_cache(scratch, &data, &len) == 0) {
        what = "write the cache";
        path = CACHE_PATH;
        etc = gct_resolve(rootfd, "/etc", O_PATH | O_DIRECTORY);
        if (etc >= 0)
            rc = gct_replace_file(etc, CACHE_NAME, data, len, 0644, 1);   /* fsync'd, as ldconfig does */
    }
    errnum = errno;
    if (etc >= 0)
        close(etc);
    free(data);
    if (rc == 0)
        return 0;
    os = hook_oserror(errnum, path);
    hook_fail(err, rootfs, "ldconfig failed: %s: %s", what, os ? os : "");
    free(os);
    return -1;
}

int hook_run_ldconfig(int rootfd, const char *rootfs, const char *ldconfig, const char *const *folders,
                      size_t nfolders, struct hook_error *err)
{
    struct gct_exe_check check;
    char **argv, *output;
    int fd, scratch, rc;
    size_t n = 0;

    fd = gct_open_static_executable(ldconfig, &check);
    if (fd < 0)
        return fail_open(err, rootfs, &check, errno);
    scratch = open_scratch(rootfd);
    argv = calloc(nfolders + 4, sizeof(*argv));
    output = malloc(GCT_LDCONFIG_OUTPUT_LIMIT);
    if (argv == NULL || output == NULL) {
        rc = hook_fail(err, NULL, "out of memory");
    } else {
        argv[n++] = "ldconfig";
        if (scratch >= 0) {
            argv[n++] = "-C";
            argv[n++] = SCRATCH_CACHE;
        }
        memcpy(argv + n, folders, nfolders * sizeof(*argv));
        rc = run(fd, scratch, rootfs, argv, output, err);
        if (rc == 0 && scratch >= 0)
            rc = install_cache(rootfd, scratch, rootfs, err);
    }
    free(argv);
    free(output);
    if (scratch >= 0)
        close(scratch);
    close(fd);
    return rc;
}

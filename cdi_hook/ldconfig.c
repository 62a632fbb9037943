/* The host's ldconfig for the container, through libcontainer_c's one runner: the binary is opened
 * here and must be static (gct_open_static_executable), then gct_update_ld_cache (src/ld_cache.c,
 * the prestart hook's too) runs it in the sandbox (gct_sandbox_exec: private mount namespace,
 * nodev/nosuid/noexec copy of the rootfs, chroot, no capabilities, no_new_privs, empty environment,
 * the limits of libcontainer.h) with its cache on a scratch tmpfs, and puts the cache in
 * /etc/ld.so.cache unless that already is the same file. Failures read as libcontainer_c.ldconfig's
 * LdconfigError words them, after "ldconfig failed: ". */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cdi_hook.h"
#include "message_text.h"
#include "libcontainer.h"

/* "open ldconfig: [Errno 2] ...: '/x'", "refusing ldconfig: it is a script, ...: [Errno 8] ...: '/x'" */
static int fail_open(struct hook_error *err, const char *rootfs, const struct gct_exe_check *check, int errnum)
{
    char *os = text_oserror(errnum, check->path);

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
 * (text_make_printable): the output may name files of the image, and the error stays one plain line. */
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
    text_make_printable(line);
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
    char *os = text_oserror(errnum, rootfs);
    const char *line = last_line(output, len);

    hook_fail(err, rootfs, "ldconfig failed: %s: %s (exit status %d%s%s)", what, os ? os : "", returncode(status),
              line[0] ? ": " : "", line);
    free(os);
    return -1;
}

static int run(int exe_fd, int rootfd, const char *rootfs, char **argv, char *output, struct hook_error *err)
{
    struct gct_sandbox sb = {
        .exe_fd = exe_fd, .mntns_fd = -1, .root_path = rootfs, .argv = argv,
        .limits = { GCT_LDCONFIG_CPU_SECONDS, GCT_LDCONFIG_ADDRESS_SPACE, GCT_LDCONFIG_OPEN_FILES,
                    GCT_LDCONFIG_FILE_SIZE },
        .timeout_ms = GCT_LDCONFIG_TIMEOUT_MS,
    };
    struct gct_sandbox_result res;
    char what[64], *os;
    int errnum;

    if (gct_update_ld_cache(rootfd, &sb, output, GCT_LDCONFIG_OUTPUT_LIMIT, &res) == 0) {
        if (returncode(res.status) == 0)
            return 0;
        return fail_run(err, rootfs, "ldconfig", EIO, res.status, output, res.output_len);
    }
    errnum = errno;
    if (res.timed_out) {
        snprintf(what, sizeof(what), "ldconfig timed out after %gs", GCT_LDCONFIG_TIMEOUT_MS / 1000.0);
        return fail_run(err, rootfs, what, errnum, res.status, output, res.output_len);
    }
    /* a setup step names the root; reading or writing the cache names that file */
    os = text_oserror(errnum, res.path ? res.path : rootfs);
    hook_fail(err, rootfs, "ldconfig failed: %s: %s", res.stage[0] ? res.stage : "start ldconfig", os ? os : "");
    free(os);
    return -1;
}

int hook_run_ldconfig(int rootfd, const char *rootfs, const char *ldconfig, const char *const *folders,
                      size_t nfolders, struct hook_error *err)
{
    struct gct_exe_check check;
    char **argv, *output;
    int fd, rc;

    fd = gct_open_static_executable(ldconfig, &check);
    if (fd < 0)
        return fail_open(err, rootfs, &check, errno);
    argv = calloc(nfolders + 2, sizeof(*argv));
    output = malloc(GCT_LDCONFIG_OUTPUT_LIMIT);
    if (argv == NULL || output == NULL) {
        rc = hook_fail(err, NULL, "out of memory");
    } else {
        argv[0] = "ldconfig";
        memcpy(argv + 1, folders, nfolders * sizeof(*argv));
        rc = run(fd, rootfd, rootfs, argv, output, err);
    }
    free(argv);
    free(output);
    close(fd);
    return rc;
}

/* The one sandboxed runner: a HOST binary (opened by the caller before anything is entered) executed
 * from its fd inside a container's rootfs. The child optionally joins the container's mount
 * namespace, takes a private copy of it, covers the rootfs with a nodev,nosuid,noexec copy of
 * itself, hides a procfs mounted in it (its /proc/<pid>/root magic links lead out of any chroot)
 * under an empty tmpfs or under gct_update_ld_cache's scratch tmpfs (gct_sandbox_run: the program's
 * way to hand back a file), chroots into it, sets resource limits, drops every capability, sets
 * no_new_privs and execs with an empty environment. The caller gets the wait status and what the program wrote to stdout/stderr, or
 * the setup stage that failed with its errno. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/magic.h>
#include <linux/openat2.h>

#include "internal.h"
#include "libcontainer.h"

struct setup_failure {
    int err;
    char stage[32];
};

static void report(int fd, const char *stage)
{
    struct setup_failure f;
    ssize_t unused;

    memset(&f, 0, sizeof(f));
    f.err = errno ? errno : EIO;
    strncpy(f.stage, stage, sizeof(f.stage) - 1);
    unused = write(fd, &f, sizeof(f));
    (void)unused;
    _exit(127);
}

int gct_sandbox_proc_dir(int rootfd)
{
    return gct_openat2_in_root(rootfd, "proc", O_PATH | O_DIRECTORY, RESOLVE_NO_SYMLINKS);
}

/* The caller's scratch tmpfs over <root>/proc (gct_sandbox_proc_dir): a procfs there is covered as
 * well. */
static int attach_scratch(int rootfd, int scratch_fd)
{
    int fd = gct_sandbox_proc_dir(rootfd), rc;

    if (fd < 0)
        return -1;
    rc = move_mount(scratch_fd, "", fd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH);
    gct_close_keep_errno(fd);
    return rc;
}

/* An empty read-only tmpfs over <root>/proc when that is a procfs, in our private mount copy only. */
static int hide_procfs(int rootfd)
{
    struct statfs sfs;
    int fd, mnt;

    fd = gct_sandbox_proc_dir(rootfd);
    if (fd < 0)
        return 0;   /* no /proc directory (or a symlink): nothing mounted there to hide */
    if (fstatfs(fd, &sfs) < 0 || sfs.f_type != PROC_SUPER_MAGIC) {
        close(fd);
        return 0;
    }
    mnt = gct_mount_tmpfs(rootfd, fd, "mode=0555,size=4k",
                          GCT_ATTR_RDONLY | GCT_ATTR_NOSUID | GCT_ATTR_NODEV | GCT_ATTR_NOEXEC);
    gct_close_keep_errno(fd);
    if (mnt < 0)
        return -1;
    close(mnt);
    return 0;
}

/* Puts a recursive copy of the rootfs over itself (in our private mount copy) with nodev, nosuid and
 * noexec: the program may open what the image holds, but a device node the image ships (say a link
 * to a watchdog device among the libraries) opens nothing, since this child is in the HOST's device
 * cgroup. Returns an fd of the new root. */
static int open_restricted_root(const char *root_path)
{
    int rootfd, tree;

    rootfd = gct_open_root(root_path);
    if (rootfd < 0)
        return -1;
    tree = gct_clone_tree(rootfd, NULL, 1);
    if (tree < 0 || gct_set_tree_attrs(tree, GCT_ATTR_NODEV | GCT_ATTR_NOSUID | GCT_ATTR_NOEXEC, 0) < 0
        || move_mount(tree, "", rootfd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) < 0) {
        gct_close_keep_errno(tree);
        gct_close_keep_errno(rootfd);
        return -1;
    }
    close(rootfd);
    /* the tree fd is the new mount's root: exactly the view to chroot into */
    return tree;
}

static int redirect_stdio(int outfd)
{
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);

    if (null < 0 || dup2(null, 0) < 0 || dup2(outfd, 1) < 0 || dup2(outfd, 2) < 0)
        return -1;
    close(null);
    return 0;
}

static void child_main(const struct gct_sandbox *sb, int scratch_fd, int outfd, int statusfd)
{
    char *const empty_env[] = { NULL };
    int rootfd;

    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (redirect_stdio(outfd) < 0)
        report(statusfd, "stdio");
    if (sb->mntns_fd >= 0 && setns(sb->mntns_fd, CLONE_NEWNS) < 0)
        report(statusfd, "setns");
    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        report(statusfd, "private mount namespace");
    rootfd = open_restricted_root(sb->root_path);
    if (rootfd < 0)
        report(statusfd, "open root");
    if (scratch_fd >= 0 && attach_scratch(rootfd, scratch_fd) < 0)
        report(statusfd, "scratch mount");
    if (scratch_fd < 0 && hide_procfs(rootfd) < 0)
        report(statusfd, "hide procfs");
    if (fchdir(rootfd) < 0 || chroot(".") < 0 || chdir("/") < 0)
        report(statusfd, "chroot");
    close(rootfd);
    if (gct_set_limits(&sb->limits) < 0)
        report(statusfd, "rlimits");
    /* nothing of ours may reach the program: every other fd closes at exec (the binary's fd too,
     * which is fine for an ELF executable) */
    if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
        report(statusfd, "close fds");
    if (gct_drop_privileges() < 0)
        report(statusfd, "drop privileges");
    syscall(SYS_execveat, sb->exe_fd, "", sb->argv, empty_env, AT_EMPTY_PATH);
    report(statusfd, "execveat");
}

static long now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* Reads the child's output (keeping what fits) and its setup failure until both pipes close or the
 * deadline passes. Returns 1 on timeout. */
static int collect(int outfd, int statusfd, char *out, unsigned long size,
                   struct gct_sandbox_result *res, long deadline)
{
    struct pollfd fds[2] = { { outfd, POLLIN, 0 }, { statusfd, POLLIN, 0 } };
    struct setup_failure f;
    char sink[4096];
    ssize_t n;
    long left;

    while (fds[0].fd >= 0 || fds[1].fd >= 0) {
        left = deadline - now_ms();
        if (left <= 0)
            return 1;
        if (poll(fds, 2, (int)left) < 0) {
            if (errno == EINTR)
                continue;
            return 1;
        }
        if (fds[0].fd >= 0 && fds[0].revents) {
            if (res->output_len + 1 < size)
                n = read(outfd, out + res->output_len, size - 1 - res->output_len);
            else
                n = read(outfd, sink, sizeof(sink));
            if (n > 0 && res->output_len + 1 < size)
                res->output_len += (unsigned long)n;
            if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
                fds[0].fd = -1;
        }
        if (fds[1].fd >= 0 && fds[1].revents) {
            n = read(statusfd, &f, sizeof(f));
            if (n == (ssize_t)sizeof(f)) {
                res->err = f.err;
                memcpy(res->stage, f.stage, sizeof(res->stage));
            }
            fds[1].fd = -1;   /* exec closed it, or the report is complete */
        }
    }
    return 0;
}

int gct_sandbox_run(const struct gct_sandbox *sb, int scratch_fd, char *output, unsigned long output_size,
                    struct gct_sandbox_result *res)
{
    int outpipe[2], statuspipe[2];
    pid_t pid;

    memset(res, 0, sizeof(*res));
    if (pipe2(outpipe, O_CLOEXEC) < 0)
        return -1;
    if (pipe2(statuspipe, O_CLOEXEC) < 0) {
        gct_close_keep_errno(outpipe[0]);
        gct_close_keep_errno(outpipe[1]);
        return -1;
    }
    pid = fork();
    if (pid == 0)
        child_main(sb, scratch_fd, outpipe[1], statuspipe[1]);
    close(outpipe[1]);
    close(statuspipe[1]);
    if (pid > 0 && collect(outpipe[0], statuspipe[0], output, output_size, res,
                           now_ms() + sb->timeout_ms)) {
        kill(pid, SIGKILL);
        res->timed_out = 1;
    }
    if (output_size > 0)
        output[res->output_len] = '\0';
    close(outpipe[0]);
    close(statuspipe[0]);
    if (pid < 0)
        return -1;
    while (waitpid(pid, &res->status, 0) < 0 && errno == EINTR)
        ;
    if (res->err) {
        errno = res->err;
        return -1;
    }
    if (res->timed_out) {
        errno = ETIMEDOUT;
        return -1;
    }
    return 0;
}

int gct_sandbox_exec(const struct gct_sandbox *sb, char *output, unsigned long output_size,
                     struct gct_sandbox_result *res)
{
    return gct_sandbox_run(sb, -1, output, output_size, res);
}

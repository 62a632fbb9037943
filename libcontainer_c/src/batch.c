/* A batch of rootfs operations run by a forked child, optionally inside another process's mount
 * namespace (setns on /proc/<pid>/ns/mnt). The caller never changes namespace itself, and no Python
 * runs in the child: the batch is a plain array the child walks in C. On the first failure the child
 * unmounts what it mounted (last first) and reports which operation failed, on which path, with
 * which errno. Bind sources are tree fds cloned by the caller (in its own namespace) before the fork. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "libcontainer.h"

static void set_error(struct gct_batch_error *e, int index, int kind, const char *stage, const char *path)
{
    e->err = errno ? errno : EIO;
    e->index = index;
    e->kind = kind;
    strncpy(e->stage, stage, sizeof(e->stage) - 1);
    e->stage[sizeof(e->stage) - 1] = '\0';
    strncpy(e->path, path ? path : "", sizeof(e->path) - 1);
    e->path[sizeof(e->path) - 1] = '\0';
}

/* The mount target of a device node: a placeholder file, or a device node the rootfs already has
 * there (a privileged container's /dev holds the host's nodes); mounting over it hides it. A link or
 * any other kind of file there is still refused. */
static int device_target(int rootfd, const char *path)
{
    struct stat st;
    int fd;

    fd = gct_placeholder_file(rootfd, path, 0644);
    if (fd >= 0 || errno != EEXIST)
        return fd;
    fd = gct_resolve(rootfd, path, O_PATH | O_NOFOLLOW);
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) < 0 || !(S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))) {
        close(fd);
        errno = EEXIST;
        return -1;
    }
    return fd;
}

/* The batch child's shared mount target for files (gct_placeholder_file_shared): one inode for all. */
static struct gct_shared_placeholder shared_target = {-1, 0, -2};

static int bind_op(int rootfd, const struct gct_op *op)
{
    struct stat st;
    int target, rc;

    if (fstat(op->src_fd, &st) < 0)
        return -1;
    if (S_ISDIR(st.st_mode))
        target = gct_placeholder_dir(rootfd, op->path, 0755);
    else if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))
        target = device_target(rootfd, op->path);
    else
        target = gct_placeholder_file_shared(rootfd, op->path, 0644, &shared_target);
    if (target < 0)
        return -1;
    rc = gct_bind_tree(rootfd, op->src_fd, target, op->attr_set, op->attr_clr);
    gct_close_keep_errno(target);
    return rc < 0 ? -1 : op->src_fd;
}

/* Links of a batch with the same text share one inode: a link is a hard link of the first one made
 * with that text (the i386 and x86_64 library folders hold ~20 pairs), as new inodes cost far more
 * than links on a fresh rootfs (docs/runtime-shim.md, issue 25). A symlink's text is read relative to
 * the folder it is reached through, so each name behaves as a link of its own would. Only links this
 * batch made are shared (never one of the image's), each checked after the link to be that very inode;
 * whatever cannot be shared is left to gct_symlink, which makes or replaces the link as always. */
#define MADE_LINKS_MAX 256
static struct made_link {
    const char *text;
    int dirfd;
    char name[NAME_MAX + 1];
    dev_t dev;
    ino_t ino;
} made_links[MADE_LINKS_MAX];
static int n_made_links;

static struct made_link *made_link_with_text(const char *text)
{
    int i;

    for (i = 0; i < n_made_links; i++)
        if (strcmp(made_links[i].text, text) == 0)
            return &made_links[i];
    return NULL;
}

/* 1 when fd (O_PATH of a symlink) is a link whose text is text byte for byte, with *st its stat. */
static int is_link_with_text(int fd, const char *text, struct stat *st)
{
    char got[PATH_MAX];
    size_t len = strlen(text);
    ssize_t n;

    if (fstat(fd, st) < 0 || !S_ISLNK(st->st_mode))
        return 0;
    n = readlinkat(fd, "", got, sizeof(got));
    return n >= 0 && (size_t)n == len && memcmp(got, text, len) == 0;
}

/* Keeps parent (the link's folder) open to link from later; closes it when the link is not kept.
 * The inode remembered is the one at name now, read through one fd: a link that holds the text we
 * made it with (a symlink's text never changes, so every later hard link checked to be this inode
 * has it too). A process in the container may have put its own link there since our symlinkat:
 * that one is never shared, or its text would show in folders the process may not write to. */
static void remember_link(const char *text, int parent, const char *name)
{
    struct made_link *m = &made_links[n_made_links];
    struct stat st;
    int fd, ours;

    fd = n_made_links < MADE_LINKS_MAX ? openat(parent, name, O_PATH | O_NOFOLLOW | O_CLOEXEC) : -1;
    ours = fd >= 0 && is_link_with_text(fd, text, &st);
    if (fd >= 0)
        close(fd);
    if (!ours) {
        close(parent);
        return;
    }
    m->text = text;
    m->dirfd = parent;
    strcpy(m->name, name);   /* gct_split_path bounded it by NAME_MAX */
    m->dev = st.st_dev;
    m->ino = st.st_ino;
    n_made_links++;
}

/* 0 when name in parent is now a hard link of m's link; -1 when not (nothing is left there). */
static int link_made_link(struct made_link *m, int parent, const char *name)
{
    struct stat st;

    if (linkat(m->dirfd, m->name, parent, name, 0) < 0)
        return -1;
    if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode) && st.st_dev == m->dev
        && st.st_ino == m->ino)
        return 0;
    unlinkat(parent, name, 0);   /* m's name no longer holds its link: never keep what it holds now */
    m->text = "";                /* and share it no more (a link's text is never empty) */
    errno = ESTALE;
    return -1;
}

static int symlink_op(int rootfd, const struct gct_op *op)
{
    char dir[PATH_MAX], name[NAME_MAX + 1];
    struct made_link *same;
    int parent;

    if (op->target == NULL || op->target[0] == '\0'
        || gct_split_path(op->path, dir, sizeof(dir), name, sizeof(name)) < 0)
        return gct_symlink(rootfd, op->target, op->path);   /* its errors, as always */
    parent = gct_mkdir_p(rootfd, dir, 0755);
    if (parent < 0)
        return -1;
    same = made_link_with_text(op->target);
    if (same != NULL) {
        if (link_made_link(same, parent, name) == 0) {
            close(parent);
            return 0;
        }
        /* something there already (EEXIST), another file system (EXDEV), too many links...: */
        close(parent);
        return gct_symlink(rootfd, op->target, op->path);
    }
    if (symlinkat(op->target, parent, name) < 0) {
        gct_close_keep_errno(parent);
        return errno == EEXIST ? gct_symlink(rootfd, op->target, op->path) : -1;
    }
    remember_link(op->target, parent, name);
    return 0;
}

static int tmpfs_op(int rootfd, const struct gct_op *op)
{
    int target, mntfd;

    target = gct_placeholder_dir(rootfd, op->path, 0755);
    if (target < 0)
        return -1;
    mntfd = gct_mount_tmpfs(rootfd, target, op->data, op->attr_set);
    gct_close_keep_errno(target);
    return mntfd;
}

static int remount_op(int rootfd, const struct gct_op *op)
{
    struct mount_attr attr;
    int fd, rc;

    fd = gct_resolve(rootfd, op->path, O_PATH);
    if (fd < 0)
        return -1;
    memset(&attr, 0, sizeof(attr));
    attr.attr_set = op->attr_set;
    attr.attr_clr = op->attr_clr;
    rc = mount_setattr(fd, "", AT_EMPTY_PATH, &attr, sizeof(attr));
    gct_close_keep_errno(fd);
    return rc;
}

/* Undo of an earlier batch's mount. A path that does not exist (ENOENT) or is not the root of a
 * mount (EINVAL) has nothing mounted to undo. The last component is not followed: a link never
 * redirects the unmount. */
static int umount_op(int rootfd, const struct gct_op *op)
{
    int fd, rc;

    fd = gct_resolve(rootfd, op->path, O_PATH | O_NOFOLLOW);
    if (fd < 0)
        return errno == ENOENT ? 0 : -1;
    rc = gct_umount_fd(fd);
    gct_close_keep_errno(fd);
    return rc < 0 && errno == EINVAL ? 0 : rc;
}

static int close_result(int fd)
{
    return fd < 0 ? -1 : close(fd);
}

/* Runs one operation. Returns -1 on error, else the fd of a new mount to remember for rollback or
 * GCT_NO_MOUNT. */
#define GCT_NO_MOUNT (-2)
static int run_op(int rootfd, const struct gct_op *op)
{
    if (op->path == NULL || (op->kind == GCT_OP_WRITE_FILE && op->data == NULL && op->data_len)) {
        errno = EINVAL;
        return -1;
    }
    switch (op->kind) {
    case GCT_OP_MKDIR:
        return close_result(gct_mkdir_p(rootfd, op->path, op->mode)) < 0 ? -1 : GCT_NO_MOUNT;
    case GCT_OP_FILE:
        return close_result(gct_placeholder_file(rootfd, op->path, op->mode)) < 0 ? -1 : GCT_NO_MOUNT;
    case GCT_OP_DIR:
        return close_result(gct_placeholder_dir(rootfd, op->path, op->mode)) < 0 ? -1 : GCT_NO_MOUNT;
    case GCT_OP_SYMLINK:
        return symlink_op(rootfd, op) < 0 ? -1 : GCT_NO_MOUNT;
    case GCT_OP_WRITE_FILE:
        return gct_write_new_file(rootfd, op->path, op->data, op->data_len, op->mode) < 0 ? -1 : GCT_NO_MOUNT;
    case GCT_OP_REMOUNT:
        return remount_op(rootfd, op) < 0 ? -1 : GCT_NO_MOUNT;
    case GCT_OP_UMOUNT:
        return umount_op(rootfd, op) < 0 ? -1 : GCT_NO_MOUNT;
    case GCT_OP_BIND:
        return bind_op(rootfd, op);
    case GCT_OP_TMPFS:
        return tmpfs_op(rootfd, op);
    }
    errno = EINVAL;
    return -1;
}

/* For GCT_OPF_IF_EXISTS: 1 when the operation's directory exists, 0 when it is missing, -1 on error. */
static int anchor_exists(int rootfd, const struct gct_op *op)
{
    char dir[PATH_MAX], name[NAME_MAX + 1];
    const char *anchor = op->path;
    int fd;

    if (op->kind != GCT_OP_TMPFS && op->kind != GCT_OP_REMOUNT) {
        if (gct_split_path(op->path, dir, sizeof(dir), name, sizeof(name)) < 0)
            return -1;
        anchor = dir;
    }
    fd = gct_resolve(rootfd, anchor, O_PATH | O_DIRECTORY);
    if (fd >= 0) {
        close(fd);
        return 1;
    }
    return errno == ENOENT ? 0 : -1;
}

static int run_op_if_wanted(int rootfd, const struct gct_op *op)
{
    int exists;

    if (!(op->flags & GCT_OPF_IF_EXISTS))
        return run_op(rootfd, op);
    exists = anchor_exists(rootfd, op);
    if (exists < 0)
        return -1;
    return exists ? run_op(rootfd, op) : GCT_NO_MOUNT;
}

static void rollback(int *mounts, size_t n)
{
    while (n-- > 0)
        gct_umount_fd(mounts[n]);
}

/* The child's whole life: enter, open the root, run, roll back on error. Returns the exit code. */
static int child_main(int mntns_fd, const char *root_path, long fs_uid, long fs_gid, const struct gct_op *ops,
                      size_t nops, int *mounts, struct gct_batch_error *e)
{
    size_t i, nmounts = 0;
    int rootfd, fd;

    if (mntns_fd >= 0 && setns(mntns_fd, CLONE_NEWNS) < 0) {
        set_error(e, -1, 0, "setns", root_path);
        return 1;
    }
    if ((fs_uid >= 0 || fs_gid >= 0) && gct_create_files_as(fs_uid, fs_gid) < 0) {
        set_error(e, -1, 0, "setfsuid", root_path);
        return 1;
    }
    /* modes in the batch are meant exactly (a runtime may start hooks with a strict umask) */
    umask(0);
    gct_propagation_cache_enabled = 1;
    rootfd = gct_open_root(root_path);
    if (rootfd < 0) {
        set_error(e, -1, 0, "open root", root_path);
        return 1;
    }
    for (i = 0; i < nops; i++) {
        errno = 0;
        fd = run_op_if_wanted(rootfd, &ops[i]);
        if (fd == -1) {
            set_error(e, (int)i, ops[i].kind, "operation", ops[i].path);
            rollback(mounts, nmounts);
            return 1;
        }
        if (fd >= 0)
            mounts[nmounts++] = fd;
    }
    return 0;
}

static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    ssize_t n;

    while (len > 0) {
        n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static ssize_t read_all(int fd, void *buf, size_t len)
{
    size_t got = 0;
    ssize_t n;

    while (got < len) {
        n = read(fd, (char *)buf + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    return (ssize_t)got;
}

static void wait_child(pid_t pid)
{
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
}

int gct_run_batch(int mntns_fd, const char *root_path, long fs_uid, long fs_gid, const struct gct_op *ops,
                  unsigned long nops, int *mounts, struct gct_batch_error *error)
{
    int pipefd[2], code;
    pid_t parent = getpid(), pid;

    memset(error, 0, sizeof(*error));
    error->index = -1;
    if (pipe2(pipefd, O_CLOEXEC) < 0) {
        set_error(error, -1, 0, "pipe", NULL);
        return -1;
    }
    pid = fork();
    if (pid < 0) {
        set_error(error, -1, 0, "fork", NULL);
        close(pipefd[0]);
        close(pipefd[1]);
        return -1;
    }
    if (pid == 0) {
        close(pipefd[0]);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(2);
        code = child_main(mntns_fd, root_path, fs_uid, fs_gid, ops, nops, mounts, error);
        write_all(pipefd[1], error, sizeof(*error));
        _exit(code);
    }
    close(pipefd[1]);
    if (read_all(pipefd[0], error, sizeof(*error)) != (ssize_t)sizeof(*error)) {
        errno = ECHILD;
        set_error(error, -1, 0, "child died", NULL);
    }
    close(pipefd[0]);
    wait_child(pid);
    if (error->err != 0) {
        errno = error->err;
        return -1;
    }
    return 0;
}

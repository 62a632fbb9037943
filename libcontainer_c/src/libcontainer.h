/* libcontainer_c: declarations shared by the C sources and used verbatim as the cffi cdef.
 * Conventions: functions return >= 0 on success and -1 with errno set on failure. Every fd a function
 * returns is O_CLOEXEC and belongs to the caller. "rootfd" is an fd from gct_open_root(); every
 * "path" next to it is resolved inside that root, never outside it. */

/* version.c */
int gct_abi_version(void);

/* resolve.c: openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS) */
int gct_open_root(const char *path);
int gct_resolve(int rootfd, const char *path, int oflags);

/* mkdirs.c: mkdir -p inside the root; returns an O_PATH fd of the directory */
int gct_mkdir_p(int rootfd, const char *path, unsigned int mode);

/* placeholder.c: mount targets; the last component is never followed. An existing regular file
 * (directory) is reused; a symlink fails with ELOOP, a directory where a file is wanted with EISDIR,
 * anything else with EEXIST (ENOTDIR when a directory is wanted). Returns an fd of the target. */
int gct_placeholder_file(int rootfd, const char *path, unsigned int mode);
int gct_placeholder_dir(int rootfd, const char *path, unsigned int mode);

/* mounts.c: attribute bits (the kernel's MOUNT_ATTR_* values) */
enum {
    GCT_ATTR_RDONLY = 0x1,
    GCT_ATTR_NOSUID = 0x2,
    GCT_ATTR_NODEV = 0x4,
    GCT_ATTR_NOEXEC = 0x8
};
/* open_tree(OPEN_TREE_CLONE): a detached copy of the mount at dirfd/path (path NULL or "": dirfd itself) */
int gct_clone_tree(int dirfd, const char *path, int recursive);
/* mount_setattr on a tree: set/clear GCT_ATTR_* bits, propagation private, recursively */
int gct_set_tree_attrs(int treefd, unsigned int attr_set, unsigned int attr_clr);
/* move_mount of a tree onto a target fd; EXDEV when the target is on a shared mount other than the
 * root's own mount (the mount would propagate to its peers, e.g. into a host directory through a
 * volume mounted rshared); rootfd -1: refuse every shared mount */
int gct_attach_tree(int rootfd, int treefd, int targetfd);
/* gct_set_tree_attrs then gct_attach_tree */
int gct_bind_tree(int rootfd, int treefd, int targetfd, unsigned int attr_set, unsigned int attr_clr);
/* lazily unmounts the mount whose root mountfd holds (e.g. a tree fd after attaching it) */
int gct_umount_fd(int mountfd);
/* a new tmpfs ("key=value,..." options) with GCT_ATTR_* bits attached on the target; returns its
 * mount fd */
int gct_mount_tmpfs(int rootfd, int targetfd, const char *options, unsigned int attr_set);

/* file_over.c: a new file holding data (len bytes, mode 0444) mounted ro,nosuid,nodev,noexec over the
 * regular file at path inside the root; the file lives on a tmpfs of its own. ENOENT/ENOTDIR when path
 * is not there, ELOOP for a symlink, EISDIR for a directory, EINVAL for anything else but a regular file */
int gct_mount_file_over(int rootfd, const char *path, const char *data, unsigned long len);

/* cuda_compat.c: the driver major version of the image's CUDA forward-compatibility library, the one
 * /usr/local/cuda/compat/libcuda.so.<major>.<...> (the folder opened inside the root); 0 when there is
 * none, -1 with errno on an error (ENOTUNIQ: several of them, E2BIG: a folder of 65536+ entries) */
int gct_cuda_compat_major(int rootfd);
/* that folder, as the container sees it */
const char *gct_cuda_compat_dir(void);

/* propagation.c: 1 when fd lies on a shared mount (peer group) that is not rootfd's mount, else 0 */
int gct_on_shared_mount(int fd, int rootfd);

/* symlinks.c: linkpath -> target; an existing symlink with exactly that text is left, one with another
 * text is replaced (a link made under a temporary name, renamed into place); EISDIR for a directory,
 * EEXIST for any other existing entry */
int gct_symlink(int rootfd, const char *target, const char *linkpath);

/* app_profile.c: the application profile limiting EGL and Vulkan to the GPUs of the root's /dev
 * (docs/reference.md#application-profiles): 1 when written (or already so), 0 when the root has no
 * GPU node (nothing written), -1 with errno. mask: the GPUs' bits; dropped: GPU nodes whose minor is
 * too large for the mask (64 or more). */
int gct_update_application_profile(int rootfd, unsigned long long *mask, int *dropped);
const char *gct_application_profile_path(void);

/* placeholder.c: a new regular file (O_EXCL, last component not followed) holding data */
int gct_write_new_file(int rootfd, const char *path, const char *data, unsigned long len, unsigned int mode);

/* batch.c: operations run by a forked child, optionally in another mount namespace */
enum {
    GCT_OP_MKDIR = 1,      /* mkdir -p path (mode) */
    GCT_OP_FILE = 2,       /* placeholder file at path (mode) */
    GCT_OP_DIR = 3,        /* placeholder dir at path (mode) */
    GCT_OP_BIND = 4,       /* attach tree src_fd (from gct_clone_tree) at path; attr_set/attr_clr */
    GCT_OP_SYMLINK = 5,    /* path -> target */
    GCT_OP_TMPFS = 6,      /* tmpfs on dir path; data = "key=value,..." options or NULL; attr_set */
    GCT_OP_WRITE_FILE = 7, /* new file at path with data_len bytes of data (mode) */
    GCT_OP_REMOUNT = 8,    /* mount_setattr attr_set/attr_clr on the mount whose root is path */
    GCT_OP_UMOUNT = 9      /* lazily unmount the mount whose root is path (path missing or nothing
                            * mounted there: a no-op), to undo an earlier batch */
};
struct gct_op {
    int kind;
    const char *path;
    const char *target;
    const char *data;
    unsigned long data_len;
    int src_fd;
    unsigned int mode;
    unsigned int attr_set;
    unsigned int attr_clr;
    int flags;             /* GCT_OPF_* */
};
enum {
    /* skip the operation (no error) when the directory it works in is missing: the path itself for
     * TMPFS and REMOUNT, its parent for the others (e.g. /proc/driver/nvidia without a driver) */
    GCT_OPF_IF_EXISTS = 1
};
struct gct_batch_error {
    int err;          /* errno; 0 = success */
    int index;        /* failed operation, -1 when the setup failed (see stage) */
    int kind;         /* GCT_OP_* of the failed operation */
    char stage[32];   /* "operation", "setns", "open root", "fork", "child died" ... */
    char path[4096];  /* the operation's path (or the root for setup stages) */
};
/* Forks; the child enters mntns_fd (skipped when -1), opens root_path there and runs ops in order.
 * fs_uid, fs_gid (both -1: unchanged): the ids the child creates files with, the host's ids of the
 * root of the container's user namespace (a file system mounted in that namespace, such as the /dev
 * tmpfs, refuses to create files for ids it cannot map: EOVERFLOW).
 * mounts: caller-provided scratch of nops ints (no allocation happens in the child). On the first
 * error the child unmounts what it mounted; returns -1 with errno and error filled in. */
int gct_run_batch(int mntns_fd, const char *root_path, long fs_uid, long fs_gid, const struct gct_op *ops,
                  unsigned long nops, int *mounts, struct gct_batch_error *error);

/* privileges.c */
struct gct_limits {
    unsigned long cpu_seconds;    /* RLIMIT_CPU; 0 = unchanged (same for every field) */
    unsigned long address_space;  /* RLIMIT_AS, bytes */
    unsigned long open_files;     /* RLIMIT_NOFILE */
    unsigned long file_size;      /* RLIMIT_FSIZE, bytes */
};
int gct_set_limits(const struct gct_limits *limits);
/* securebits (no root privileges on exec, locked), no_new_privs, empty ambient/bounding/capability sets */
int gct_drop_privileges(void);
/* Only the capabilities in keep (bit n = capability n) stay in the bounding, effective and permitted
 * sets (the bounding set only with CAP_SETPCAP); inheritable and ambient emptied; no_new_privs. Those
 * also in not_inherited leave the bounding set: this process keeps them, nothing it execs gets them. */
int gct_keep_capabilities(unsigned long long keep, unsigned long long not_inherited);
/* Files are created as uid, gid (setfsuid/setfsgid: needs CAP_SETUID and CAP_SETGID) with the same
 * effective capabilities as before (the kernel drops the file system ones on leaving fsuid 0). */
int gct_create_files_as(long uid, long gid);
/* The host ids of the root of pid's user namespace (from its uid_map and gid_map), what files made for
 * that container are created as; each -1 when pid shares our user namespace, has no root mapped, or
 * its maps cannot be read. */
void gct_container_root_ids(long pid, long *uid, long *gid);

/* sandbox_exec.c: run a host binary from its fd inside a rootfs, unprivileged */
struct gct_sandbox {
    int exe_fd;              /* the binary, opened (O_RDONLY) in the caller's namespace */
    int mntns_fd;            /* mount namespace to join first; -1: the caller's */
    const char *root_path;   /* the rootfs as seen in that namespace; the child chroots here */
    char **argv;             /* NULL-terminated; the environment is always empty */
    struct gct_limits limits;
    int timeout_ms;          /* wall-clock limit; the child is killed after it */
};
struct gct_sandbox_result {
    int status;                   /* waitpid() status of the child */
    int err;                      /* errno of a failed setup step, or of gct_update_ld_cache's own (0: none) */
    char stage[32];               /* that step: "setns", "chroot", "execveat" ... */
    int timed_out;
    unsigned long output_len;     /* bytes of stdout+stderr kept in output (NUL-terminated) */
    const char *path;             /* the file a failed step was about (gct_update_ld_cache's own steps);
                                     NULL: the root */
};
/* Returns 0 when the binary ran to completion (look at status), -1 with errno on a setup failure
 * (res->stage) or ETIMEDOUT. */
int gct_sandbox_exec(const struct gct_sandbox *sb, char *output, unsigned long output_size,
                     struct gct_sandbox_result *res);

/* static_exe.c: open a HOST binary to run inside a rootfs (the sandbox's exe_fd). Anything but a
 * static ELF executable is refused with ENOEXEC: the kernel would look up a script's interpreter or
 * an ELF's PT_INTERP inside the chroot. A script gives way to "<path>.real" when that exists
 * (Ubuntu's /sbin/ldconfig wrapper). Returns an O_RDONLY fd, or -1 with errno and check filled in:
 * problem GCT_EXE_NOT_OPENED (open failed: errno says why) or the refused kind, path the file
 * that failed. */
enum {
    GCT_EXE_NOT_OPENED = 0,
    GCT_EXE_STATIC = 1,
    GCT_EXE_SCRIPT = 2,
    GCT_EXE_DYNAMIC = 3,
    GCT_EXE_NOT_ELF = 4
};
struct gct_exe_check {
    int problem;              /* GCT_EXE_* */
    char path[4096];          /* the file opened last (path, or the "<path>.real" it gave way to) */
};
int gct_open_static_executable(const char *path, struct gct_exe_check *check);
/* why a GCT_EXE_* kind is refused, as a phrase ("it is a script, whose interpreter ...") */
const char *gct_exe_problem_text(int problem);

/* The sandboxed ldconfig's limits, for every caller of the runner (libcontainer_c.ldconfig and
 * nvidia-cdi-hook): cpu 10 s, address space 1 GiB, 256 files, 64 MiB written per file, 10 s of
 * wall-clock time, 64 KiB of output kept. */
enum {
    GCT_LDCONFIG_CPU_SECONDS = 10,
    GCT_LDCONFIG_ADDRESS_SPACE = 1073741824,
    GCT_LDCONFIG_OPEN_FILES = 256,
    GCT_LDCONFIG_FILE_SIZE = 67108864,
    GCT_LDCONFIG_TIMEOUT_MS = 10000,
    GCT_LDCONFIG_OUTPUT_LIMIT = 65536
};

/* ld_cache.c: the root's /etc/ld.so.cache rebuilt by the host's ldconfig (sb: exe_fd from
 * gct_open_static_executable, argv "ldconfig" [options] folders..., the GCT_LDCONFIG_* limits). rootfd
 * is the same root as sb->root_path in sb->mntns_fd, as that namespace sees it (a caller outside it:
 * the path resolved inside /proc/<pid>/root), so the cache goes where ldconfig looked. When the root
 * has a /proc directory, ldconfig writes the cache ("-C" after argv[0])
 * on a scratch tmpfs there, and a cache that differs from the root's /etc/ld.so.cache is put there
 * (a fresh file, fsync'd, renamed into place): an identical one is left as it is (same inode, not written). Without one,
 * ldconfig writes it itself. Returns 0 when ldconfig ran (look at res->status: the cache is installed
 * only after exit status 0), -1 with errno on a setup failure (res->stage), ETIMEDOUT, or a failure
 * to read or install the cache (res->stage "read the cache it built" or "write the cache", res->path
 * the file). */
int gct_update_ld_cache(int rootfd, const struct gct_sandbox *sb, char *output, unsigned long output_size,
                        struct gct_sandbox_result *res);

/* ld_so_conf.c: lists folders (absolute, no newline: EINVAL) one a line in the root's
 * /etc/ld.so.conf.d/00-nvidia-cdi-hook.conf, so that an ldconfig the container runs later keeps
 * them. The directory is resolved (and made) inside the root; the file is written under a fresh
 * name there (O_EXCL, mode 0644) and renamed into place: nothing the image put there is written
 * through. A drop-in already as writing it would leave it is left alone. */
int gct_write_ld_so_conf(int rootfd, const char *const *folders, unsigned long nfolders);
/* the file's path in the container, for messages */
const char *gct_ld_so_conf_path(void);

/* cgroup_devices.c: write one rule ("c 195:0 rw") to <hierarchy>/<cgroup>/<file> (devices.allow or
 * devices.deny); the cgroup path is walked beneath the hierarchy, which must be a cgroup v1 mount */
int gct_cgroup_v1_device_rule(const char *hierarchy, const char *cgroup, const char *file, const char *rule);

/* devcg_bpf.c: device cgroup v2 (eBPF). Access bits are the kernel's BPF_DEVCG_ACC_* values. */
enum {
    GCT_DEV_MKNOD = 1,
    GCT_DEV_READ = 2,
    GCT_DEV_WRITE = 4
};
struct gct_device_rule {
    int allow;              /* 1 allow, 0 deny */
    char type;              /* 'c', 'b' or 'a' (any) */
    long long major;        /* -1: any */
    long long minor;        /* -1: any */
    unsigned int access;    /* GCT_DEV_* bits */
};
/* Builds a device program from rules (the last matching rule wins; nothing matched: the replaced
 * program decides when keep_existing, else deny) and attaches it to <hierarchy>/<cgroup> in place of
 * the program attached there (atomically; EBUSY when several are attached). */
int gct_devcg_v2_install(const char *hierarchy, const char *cgroup, const struct gct_device_rule *rules,
                         unsigned long nrules, int keep_existing);
/* number of device programs attached to the cgroup */
int gct_devcg_v2_count(const char *hierarchy, const char *cgroup);

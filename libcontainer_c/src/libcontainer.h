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
/* move_mount of a tree onto a target fd */
int gct_attach_tree(int treefd, int targetfd);
/* gct_set_tree_attrs then gct_attach_tree */
int gct_bind_tree(int treefd, int targetfd, unsigned int attr_set, unsigned int attr_clr);
/* lazily unmounts the mount whose root mountfd holds (e.g. a tree fd after attaching it) */
int gct_umount_fd(int mountfd);
/* new tmpfs ("key=value,..." options) with GCT_ATTR_* bits on the target; returns its mount fd */
int gct_mount_tmpfs(int targetfd, const char *options, unsigned int attr_set);

/* symlinks.c: linkpath -> target, made under a temporary name and renamed into place; replaces an
 * existing symlink; EISDIR for a directory, EEXIST for any other existing entry */
int gct_symlink(int rootfd, const char *target, const char *linkpath);

/* Helpers shared by the C sources but not exported to Python (not part of the cffi cdef). */
#ifndef GCT_INTERNAL_H
#define GCT_INTERNAL_H

#include <stddef.h>

/* openat2(2) with O_CLOEXEC added and the given RESOLVE_* bits, retried on EAGAIN (the kernel returns
 * it when a rename raced with the walk); an empty path means ".". */
int gct_openat2(int dirfd, const char *path, int oflags, unsigned long long resolve);

/* openat2(2) with RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS relative to rootfd, retried on EAGAIN
 * (the kernel returns it when a rename raced with the walk). extra_resolve adds RESOLVE_* bits. */
int gct_openat2_in_root(int rootfd, const char *path, int oflags, unsigned long long extra_resolve);

/* Split path into its parent part (copied to dir, "." when there is none) and its last component
 * (copied to name). Fails with EINVAL when the last component is empty, "." or "..", and with
 * ENAMETOOLONG when a part does not fit. */
int gct_split_path(const char *path, char *dir, size_t dirlen, char *name, size_t namelen);

/* placeholder.c: mount targets of regular files made as hard links of one empty file (the first one
 * made), so a batch of ~70 targets allocates one inode instead of ~70: a new inode costs far more than
 * a link on a fresh rootfs (docs/runtime-shim.md, issue 25). What a container sees is the same: each
 * target is covered by its mount; where nothing is mounted it is an empty root-owned file either way.
 * gct_placeholder_file_shared is gct_placeholder_file (same checks, same reuse of an existing entry)
 * but links to src's file when it can: a link it cannot make (another file system, no procfs) makes a
 * new file, which later targets then share. src->fd is the shared file, opened when it was made, so
 * the link never lands on what a mount put over its name. */
struct gct_shared_placeholder {
    int fd;             /* the shared file (O_RDONLY), -1 before the first */
    unsigned int mode;  /* its mode: only targets of the same mode share it */
    int proc_fd_dir;    /* /proc/self/fd, checked to be procfs; -1 none; -2 not opened yet */
};
void gct_shared_placeholder_init(struct gct_shared_placeholder *src);
void gct_shared_placeholder_close(struct gct_shared_placeholder *src);
int gct_placeholder_file_shared(int rootfd, const char *path, unsigned int mode,
                                struct gct_shared_placeholder *src);

/* propagation.c: set in a forked batch child, where the mount table is read once */
extern int gct_propagation_cache_enabled;

/* Read fd to its end into *data (malloc'd, not NUL-terminated), at most max + 1 bytes: *len > max means
 * "more than max" (the caller refuses it). -1 with errno on a read or allocation failure. */
int gct_read_bounded(int fd, size_t max, char **data, size_t *len);

/* close() that keeps errno, for cleanup on error paths. */
void gct_close_keep_errno(int fd);

/* mounts.c: a new tmpfs ("key=value,..." options) with GCT_ATTR_* bits, detached: returns its mount fd */
int gct_new_tmpfs(const char *options, unsigned int attr_set);

/* file_replace.c: name in dirfd holding data (len bytes, mode exactly) as a file of ours: written under
 * a temporary name (O_EXCL; fsync'd first when sync) and renamed over name, so a symlink, a hard link
 * or a FIFO there is replaced, never written through; EISDIR for a directory. A file that already is
 * exactly that (regular, our uid and gid, that mode, one link, the same bytes) is left alone. */
int gct_replace_file(int dirfd, const char *name, const char *data, unsigned long len, unsigned int mode, int sync);

/* sandbox_exec.c: gct_sandbox_exec with a way to hand a file back: scratch_fd, a detached mount
 * (gct_new_tmpfs), is put over the root's /proc (a directory, no symlink) in the child's copy instead
 * of the empty tmpfs, where the program may write what the caller reads after it; -1: none (a procfs
 * there is hidden all the same). Only gct_update_ld_cache uses it. */
struct gct_sandbox;
struct gct_sandbox_result;
/* the root's /proc as the sandbox goes by it (for its scratch mount and for a procfs to hide): a
 * directory named proc right in the root, not a symlink. Returns an O_PATH fd of it, or -1 with
 * errno (ENOENT: none, ELOOP: a symlink, ENOTDIR: anything else). */
int gct_sandbox_proc_dir(int rootfd);
int gct_sandbox_run(const struct gct_sandbox *sb, int scratch_fd, char *output, unsigned long output_size,
                    struct gct_sandbox_result *res);

#endif

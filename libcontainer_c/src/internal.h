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

/* propagation.c: set in a forked batch child, where the mount table is read once */
extern int gct_propagation_cache_enabled;

/* Read fd to its end into *data (malloc'd, not NUL-terminated), at most max + 1 bytes: *len > max means
 * "more than max" (the caller refuses it). -1 with errno on a read or allocation failure. */
int gct_read_bounded(int fd, size_t max, char **data, size_t *len);

/* close() that keeps errno, for cleanup on error paths. */
void gct_close_keep_errno(int fd);

#endif

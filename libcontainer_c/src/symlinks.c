/* Symlinks inside a root, made in the resolved parent directory. An existing symlink whose text is
 * already the target is left as it is (a restarted container reuses its rootfs: remaking every link
 * costs a create and a rename each); one with another text is replaced atomically: the new link is
 * made under a temporary name and renamed over it. A directory or any other non-symlink at the final
 * name is left alone. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "libcontainer.h"

static unsigned int tmp_counter;

/* The existing entry at name may be replaced only if it is a symlink (or there is none). */
static int check_replaceable(int parent, const char *name)
{
    struct stat st;

    if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : -1;
    if (S_ISLNK(st.st_mode))
        return 0;
    errno = S_ISDIR(st.st_mode) ? EISDIR : EEXIST;
    return -1;
}

/* 1 when name in parent is a symlink whose text is target byte for byte, 0 when it is anything
 * else (another text, not a symlink, gone), -1 on an error. The link is read, never followed: only
 * its text counts, not what it leads to. */
static int is_same_link(int parent, const char *name, const char *target)
{
    char text[PATH_MAX];
    size_t len = strlen(target);
    ssize_t n = readlinkat(parent, name, text, sizeof(text));

    if (n < 0)
        return errno == EINVAL || errno == ENOENT ? 0 : -1;
    return (size_t)n == len && memcmp(text, target, len) == 0;
}

/* symlinkat under a fresh temporary name (an image may already hold an entry of that name). */
static int make_temp_link(int parent, const char *target, char *tmp, size_t len)
{
    int attempt;

    for (attempt = 0; attempt < 16; attempt++) {
        snprintf(tmp, len, ".gct-link-%d-%u", (int)getpid(), tmp_counter++);
        if (symlinkat(target, parent, tmp) == 0)
            return 0;
        if (errno != EEXIST)
            return -1;
    }
    return -1;
}

int gct_symlink(int rootfd, const char *target, const char *linkpath)
{
    char dir[PATH_MAX], name[NAME_MAX + 1], tmp[64];
    int parent, rc = -1;

    if (target == NULL || target[0] == '\0') {
        errno = EINVAL;
        return -1;
    }
    if (gct_split_path(linkpath, dir, sizeof(dir), name, sizeof(name)) < 0)
        return -1;
    parent = gct_mkdir_p(rootfd, dir, 0755);
    if (parent < 0)
        return -1;
    /* The common case, nothing there yet: one symlinkat, atomic by itself (and cheaper than a rename,
     * which costs a journal transaction on ext4). */
    rc = symlinkat(target, parent, name);
    if (rc == 0 || errno != EEXIST)
        goto out;
    rc = is_same_link(parent, name, target);
    if (rc != 0) {   /* 1: already right, nothing to do; -1: an error */
        rc = rc > 0 ? 0 : -1;
        goto out;
    }
    rc = -1;
    if (check_replaceable(parent, name) < 0)
        goto out;
    if (make_temp_link(parent, target, tmp, sizeof(tmp)) < 0)
        goto out;
    /* rename(2) itself refuses to put a non-directory over a directory (EISDIR), which covers a
     * directory appearing between the check and the rename. */
    rc = renameat(parent, tmp, parent, name);
    if (rc < 0) {
        int saved = errno;
        unlinkat(parent, tmp, 0);
        errno = saved;
    }
out:
    gct_close_keep_errno(parent);
    return rc;
}

/* What the hook does in the container: the links first, then the ld cache. Everything inside the
 * rootfs goes through libcontainer_c/src: paths resolved by the kernel inside the root
 * (gct_resolve), links made under a temporary name and renamed (gct_symlink), the ld.so.conf.d
 * drop-in written without following anything the image put there (gct_write_ld_so_conf). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cdi_hook.h"
#include "libcontainer.h"

/* Whatever the image already has where a link goes, a file or a directory (EEXIST, EISDIR), is kept
 * with a warning and never replaced: the prestart hook's live injection does the same. */
static int create_links(int rootfd, const char *rootfs, const struct hook_tasks *tasks, struct hook_error *err)
{
    for (size_t i = 0; i < tasks->nlinks; i++) {
        const struct hook_link *l = &tasks->links[i];
        if (gct_symlink(rootfd, l->target, l->link) == 0)
            continue;
        if (errno != EEXIST && errno != EISDIR)
            return hook_fail(err, rootfs, "cannot create link %s -> %s: %s", l->link, l->target, strerror(errno));
        hook_warn("not linking %s -> %s: the image has its own file there", l->link, l->target);
    }
    return 0;
}

/* 1 when path resolves inside the root, 0 when it does not (missing, not a directory on the way,
 * a link loop), -1 on any other error. */
static int exists_in_root(int rootfd, const char *path)
{
    int fd = gct_resolve(rootfd, path, O_PATH);

    if (fd >= 0) {
        close(fd);
        return 1;
    }
    return errno == ENOENT || errno == ENOTDIR || errno == ELOOP ? 0 : -1;
}

/* The folders that exist in the root (ldconfig would complain about the others); *has_etc whether
 * the root has an /etc to hold the cache. */
static int existing_folders(int rootfd, const struct hook_tasks *tasks, const char **out, size_t *n, int *has_etc)
{
    *n = 0;
    *has_etc = exists_in_root(rootfd, "/etc");
    if (*has_etc < 0)
        return -1;
    for (size_t i = 0; i < tasks->nfolders; i++) {
        int found = exists_in_root(rootfd, tasks->folders[i]);
        if (found < 0)
            return -1;
        if (found)
            out[(*n)++] = tasks->folders[i];
    }
    return 0;
}

static int update_ldcache(int rootfd, const char *rootfs, const struct hook_tasks *tasks, struct hook_error *err)
{
    const char **folders = calloc(tasks->nfolders + 1, sizeof(*folders));
    size_t n;
    int has_etc, rc = 0;

    if (folders == NULL)
        return hook_fail(err, NULL, "out of memory");
    if (existing_folders(rootfd, tasks, folders, &n, &has_etc) < 0) {
        rc = hook_fail(err, rootfs, "cannot open the container's root: %s", strerror(errno));
    } else if (!has_etc) {
        hook_warn("the container has no /etc: ld.so.cache not updated");
    } else {
        /* the drop-in is a convenience for later ldconfig runs: a failure is only a warning */
        if (n > 0 && gct_write_ld_so_conf(rootfd, folders, n) < 0)
            hook_warn("cannot write %s: %s", gct_ld_so_conf_path(), strerror(errno));
        rc = hook_run_ldconfig(rootfs, tasks->ldconfig, folders, n, err);
    }
    free(folders);
    return rc;
}

int hook_run_tasks(const char *rootfs, const struct hook_tasks *tasks, struct hook_error *err)
{
    int rootfd = gct_open_root(rootfs), rc = 0;

    if (rootfd < 0)
        return hook_fail(err, rootfs, "cannot open the container's root: %s", strerror(errno));
    if (tasks->nlinks > 0)
        rc = create_links(rootfd, rootfs, tasks, err);
    if (rc == 0 && tasks->update_ldcache)
        rc = update_ldcache(rootfd, rootfs, tasks, err);
    close(rootfd);
    return rc;
}

/* What the hook does in the container: the links first, then the ld cache (the image's CUDA compat
 * folder first when its libraries are for a newer driver major than the host's), then the
 * application profile of its GPUs, then the driver's params (params.c), last because it is the one
 * step that mounts. Everything inside the rootfs goes
 * through libcontainer_c/src: paths resolved by the kernel inside the root (gct_resolve), links made
 * (or left, when already right) by gct_symlink, the ld.so.conf.d drop-in written without
 * following anything the image put there (gct_write_ld_so_conf), the compat folder read inside the
 * root (gct_cuda_compat_major). */
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

/* The image's CUDA forward-compat folder when its libcuda is for a newer driver major than the
 * host's (ldconfig takes the first folder's library of a soname: it goes before the driver's), else
 * NULL. It is an option of the image: a problem reading it is a warning. */
static const char *cuda_compat_folder(int rootfd, const char *host_driver_version)
{
    long host_major = strtol(host_driver_version, NULL, 10);
    int compat_major = gct_cuda_compat_major(rootfd);

    if (compat_major < 0) {
        hook_warn("not using the CUDA compat libraries in %s: %s", gct_cuda_compat_dir(),
                  errno == ENOTUNIQ ? "more than one libcuda.so.<version>" : strerror(errno));
        return NULL;
    }
    return compat_major > host_major ? gct_cuda_compat_dir() : NULL;
}

/* The folders that exist in the root (ldconfig would complain about the others), the compat folder
 * first when there is one; *has_etc whether the root has an /etc to hold the cache. */
static int existing_folders(int rootfd, const struct hook_tasks *tasks, const char **out, size_t *n, int *has_etc)
{
    *n = 0;
    *has_etc = exists_in_root(rootfd, "/etc");
    if (*has_etc < 0)
        return -1;
    if (*has_etc && tasks->host_driver_version) {
        const char *compat = cuda_compat_folder(rootfd, tasks->host_driver_version);
        if (compat)
            out[(*n)++] = compat;
    }
    for (size_t i = 0; i < tasks->nfolders; i++) {
        int found = exists_in_root(rootfd, tasks->folders[i]);
        if (found < 0)
            return -1;
        if (found && !(*n > 0 && strcmp(out[0], tasks->folders[i]) == 0))
            out[(*n)++] = tasks->folders[i];
    }
    return 0;
}

static int update_ldcache(int rootfd, const char *rootfs, const struct hook_tasks *tasks, struct hook_error *err)
{
    const char **folders = calloc(tasks->nfolders + 2, sizeof(*folders));
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
        rc = hook_run_ldconfig(rootfd, rootfs, tasks->ldconfig, folders, n, err);
    }
    free(folders);
    return rc;
}

/* EGL and Vulkan see only the container's GPUs: the application profile of its /dev/nvidia<N> nodes
 * (libcontainer_c/src/app_profile.c), as NVIDIA's hook writes it. What the image has in the way (a
 * dangling /etc/nvidia link, a directory at the file) is a warning, as an image's file at a link is:
 * the profile is a convenience, the other GPUs' nodes are not in the container either way. */
static void update_application_profile(int rootfd)
{
    unsigned long long mask;
    int dropped;

    if (gct_update_application_profile(rootfd, &mask, &dropped) < 0) {
        hook_warn("not writing %s: %s", gct_application_profile_path(), strerror(errno));
        return;
    }
    if (dropped > 0)
        hook_warn("GPU device nodes with a minor of 64 or more cannot be in the application profile: %d left out",
                  dropped);
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
    if (rc == 0 && tasks->update_application_profile)
        update_application_profile(rootfd);
    if (rc == 0 && tasks->disable_device_node_modification)
        rc = hook_disable_device_node_modification(rootfd, rootfs, tasks->params_file, err);
    close(rootfd);
    return rc;
}

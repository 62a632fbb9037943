/* The driver's application profile that limits EGL and Vulkan in a container to its own GPUs, as
 * NVIDIA's `nvidia-cdi-hook update-application-profile` writes it (docs/reference.md#application-profiles):
 * the minors of the container's /dev/nvidia<N> character devices make the EGLVisibleDGPUDevices mask of
 * /etc/nvidia/nvidia-application-profiles-rc.d/10-container.conf.
 *
 * Everything is inside the root: /dev is opened by gct_resolve (the kernel resolves it in the root, so an
 * image's /dev -> /host link leads nowhere outside), its entries are stat'ed without following a link (a
 * link named nvidia0 is not a device of the container), the folder is made by gct_mkdir_p and the file
 * put there by gct_replace_file (written under a new name and renamed, never through what the image has
 * there; left alone when it already says exactly this, as in a restarted container). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "internal.h"
#include "libcontainer.h"

#define PROFILE_DIR "/etc/nvidia/nvidia-application-profiles-rc.d"
#define PROFILE_NAME "10-container.conf"
#define MASK_BITS 64

const char *gct_application_profile_path(void)
{
    return PROFILE_DIR "/" PROFILE_NAME;
}

/* "nvidia" followed by one or more digits and nothing else: a GPU's node (not nvidiactl, nvidia-uvm) */
static int is_gpu_node_name(const char *name)
{
    if (strncmp(name, "nvidia", 6) != 0 || name[6] == '\0')
        return 0;
    for (const char *p = name + 6; *p; p++)
        if (*p < '0' || *p > '9')
            return 0;
    return 1;
}

/* The mask of the GPU nodes in the root's /dev; *dropped counts those whose minor cannot be in it. */
static int gpu_mask(int rootfd, unsigned long long *mask, int *dropped)
{
    int fd = gct_resolve(rootfd, "/dev", O_RDONLY | O_DIRECTORY);
    DIR *dir;
    struct dirent *entry;

    *mask = 0;
    *dropped = 0;
    if (fd < 0)
        return errno == ENOENT || errno == ENOTDIR ? 0 : -1;   /* no /dev: no GPU of its own */
    dir = fdopendir(fd);
    if (dir == NULL) {
        gct_close_keep_errno(fd);
        return -1;
    }
    errno = 0;
    while ((entry = readdir(dir)) != NULL) {
        struct stat st;
        if (!is_gpu_node_name(entry->d_name))
            continue;
        if (fstatat(dirfd(dir), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
            if (errno == ENOENT)
                continue;
            break;
        }
        if (!S_ISCHR(st.st_mode))
            continue;
        if (minor(st.st_rdev) >= MASK_BITS)
            (*dropped)++;
        else
            *mask |= 1ULL << minor(st.st_rdev);
        errno = 0;
    }
    int saved = errno;
    closedir(dir);
    errno = saved;
    return saved ? -1 : 0;
}

int gct_update_application_profile(int rootfd, unsigned long long *mask, int *dropped)
{
    char content[256];
    int len, dirfd, rc;

    if (gpu_mask(rootfd, mask, dropped) < 0)
        return -1;
    if (*mask == 0)
        return 0;
    len = snprintf(content, sizeof(content),
                   "{\"profiles\":[{\"name\":\"_container_\",\"settings\":[\"EGLVisibleDGPUDevices\",0x%llx]}],"
                   "\"rules\":[{\"pattern\":[],\"profile\":\"_container_\"}]}", *mask);
    if (len < 0 || (size_t)len >= sizeof(content)) {
        errno = EOVERFLOW;
        return -1;
    }
    /* 0755 folders (NVIDIA's is 0555: a folder made read-only on the way could not take the next one
     * where the hook has no CAP_DAC_OVERRIDE); the file read-only for all, as NVIDIA's */
    dirfd = gct_mkdir_p(rootfd, PROFILE_DIR, 0755);
    if (dirfd < 0)
        return -1;
    rc = gct_replace_file(dirfd, PROFILE_NAME, content, (unsigned long)len, 0444, 0);
    gct_close_keep_errno(dirfd);
    return rc < 0 ? -1 : 1;
}

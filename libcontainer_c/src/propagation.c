/* Refusing to mount onto a SHARED mount. Attaching a mount under a shared mount propagates it to every
 * peer: if an image's symlink leads a target into a volume the runtime mounted shared with the host
 * (e.g. docker -v /x:/y:rshared), our bind would appear in that host directory too. Our own trees are
 * private, but that does not stop the attach event itself, so the mount the target lives on is
 * checked first: its id from statx(STATX_MNT_ID), its propagation from /proc/self/mountinfo
 * ("shared:N"). The rootfs mount itself is exempt: docker makes it shared whenever a volume is
 * rshared, and what propagates from it lands only in the host's view of this container's own rootfs,
 * which goes away with it. */
#include <errno.h>
#include <fcntl.h>
#include <linux/stat.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"
#include "libcontainer.h"

#define MOUNTINFO_MAX (8 << 20)
#define CACHE_MAX 16384

int gct_propagation_cache_enabled;

static char mountinfo[MOUNTINFO_MAX];
static struct {
    int loaded;
    int n;
    unsigned long long ids[CACHE_MAX];
} shared_ids;

static int mount_id_of(int fd, unsigned long long *id)
{
    struct statx stx;

    memset(&stx, 0, sizeof(stx));
    if (syscall(SYS_statx, fd, "", AT_EMPTY_PATH, STATX_MNT_ID, &stx) < 0)
        return -1;
    if (!(stx.stx_mask & STATX_MNT_ID)) {
        errno = ENOSYS;
        return -1;
    }
    *id = stx.stx_mnt_id;
    return 0;
}

/* Reads the whole mount table; fails closed (E2BIG) when it does not fit. */
static ssize_t read_mountinfo(void)
{
    ssize_t got = 0, n;
    int fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return -1;
    while ((n = read(fd, mountinfo + got, MOUNTINFO_MAX - 1 - (size_t)got)) > 0)
        got += n;
    gct_close_keep_errno(fd);
    if (n < 0)
        return -1;
    if (got >= MOUNTINFO_MAX - 1) {
        errno = E2BIG;
        return -1;
    }
    mountinfo[got] = '\0';
    return got;
}

/* Whether a mountinfo line's optional fields (between the 6th field and " - ") hold "shared:". */
static int line_is_shared(const char *line, const char *end)
{
    const char *sep = strstr(line, " - "), *p;

    if (sep == NULL || sep > end)
        return 0;
    for (p = line; p < sep; p++)
        if (p[0] == ' ' && strncmp(p + 1, "shared:", 7) == 0)
            return 1;
    return 0;
}

/* Calls visit(id) for every shared mount; stops early when visit returns non-zero. */
static int scan_shared(int (*visit)(unsigned long long, unsigned long long), unsigned long long want)
{
    char *line = mountinfo, *end;
    unsigned long long id;
    int rc;

    if (read_mountinfo() < 0)
        return -1;
    for (; *line; line = end + 1) {
        end = strchr(line, '\n');
        if (end == NULL)
            end = line + strlen(line) - 1;
        id = strtoull(line, NULL, 10);
        if (line_is_shared(line, end) && (rc = visit(id, want)) != 0)
            return rc;
        if (end[1] == '\0')
            break;
    }
    return 0;
}

static int match_id(unsigned long long id, unsigned long long want)
{
    return id == want;
}

static int remember_id(unsigned long long id, unsigned long long unused)
{
    (void)unused;
    if (shared_ids.n >= CACHE_MAX) {
        errno = E2BIG;
        return -1;
    }
    shared_ids.ids[shared_ids.n++] = id;
    return 0;
}

static int cached_is_shared(unsigned long long id)
{
    int i;

    if (!shared_ids.loaded) {
        shared_ids.n = 0;
        if (scan_shared(remember_id, 0) < 0)
            return -1;
        shared_ids.loaded = 1;
    }
    for (i = 0; i < shared_ids.n; i++)
        if (shared_ids.ids[i] == id)
            return 1;
    return 0;
}

int gct_on_shared_mount(int fd, int rootfd)
{
    unsigned long long id, root_id;

    if (mount_id_of(fd, &id) < 0)
        return -1;
    if (rootfd >= 0) {
        if (mount_id_of(rootfd, &root_id) < 0)
            return -1;
        if (id == root_id)
            return 0;
    }
    /* A forked batch child sees one mount table whose shared mounts do not change under it (the
     * mounts it adds are private), so it reads the table once. */
    if (gct_propagation_cache_enabled)
        return cached_is_shared(id);
    return scan_shared(match_id, id);
}

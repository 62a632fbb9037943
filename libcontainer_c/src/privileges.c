/* Giving up privileges: before a sandboxed exec resource limits, no_new_privs, securebits that stop
 * uid 0 from regaining capabilities on execve, an empty bounding set and empty capability sets; for
 * the prestart hook and nvidia-container-cli, all capabilities but the few injection needs. And the ids
 * files are created as in a container with a user namespace of its own (its root's, on the host). */
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"
#include "libcontainer.h"

static int set_limit(int resource, unsigned long value)
{
    struct rlimit rl;

    if (value == 0)   /* 0 = leave this limit as it is */
        return 0;
    rl.rlim_cur = value;
    rl.rlim_max = value;
    return setrlimit(resource, &rl);
}

int gct_set_limits(const struct gct_limits *limits)
{
    if (set_limit(RLIMIT_CPU, limits->cpu_seconds) < 0 || set_limit(RLIMIT_AS, limits->address_space) < 0
        || set_limit(RLIMIT_NOFILE, limits->open_files) < 0 || set_limit(RLIMIT_FSIZE, limits->file_size) < 0)
        return -1;
    return 0;
}

/* Empties the bounding set: caps not in it can never come back, not even by executing as uid 0. */
static int drop_bounding_set(void)
{
    int cap;

    for (cap = 0; cap <= 63; cap++) {
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
            if (errno == EINVAL)   /* past the kernel's last capability */
                break;
            return -1;
        }
    }
    return 0;
}

static int clear_capability_sets(void)
{
    struct __user_cap_header_struct header;
    struct __user_cap_data_struct data[2];

    memset(&header, 0, sizeof(header));
    memset(data, 0, sizeof(data));
    header.version = _LINUX_CAPABILITY_VERSION_3;
    return (int)syscall(SYS_capset, &header, data);
}

int gct_drop_privileges(void)
{
    /* NOROOT: execve as uid 0 grants nothing; locked so the exec'd program cannot undo it. */
    unsigned long secure = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP
                           | SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED
                           | SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;

    if (prctl(PR_SET_SECUREBITS, secure, 0, 0, 0) < 0)
        return -1;
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return -1;
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
        return -1;
    if (drop_bounding_set() < 0)
        return -1;
    return clear_capability_sets();
}

/* Bounding set first (dropping needs CAP_SETPCAP, which keep may not hold), then the sets. Without
 * CAP_SETPCAP (a test run by an unprivileged user) the bounding set stays as it is. */
int gct_keep_capabilities(unsigned long long keep, unsigned long long not_inherited)
{
    struct __user_cap_header_struct header;
    struct __user_cap_data_struct data[2];
    int cap;

    for (cap = 0; cap <= 63; cap++) {
        if ((keep & ~not_inherited) & (1ULL << cap))
            continue;
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
            if (errno == EINVAL || errno == EPERM)   /* past the last capability; no CAP_SETPCAP */
                break;
            return -1;
        }
    }
    memset(&header, 0, sizeof(header));
    header.version = _LINUX_CAPABILITY_VERSION_3;
    if (syscall(SYS_capget, &header, data) < 0)
        return -1;
    for (int i = 0; i < 2; i++) {
        uint32_t kept = (uint32_t)(keep >> (32 * i));
        data[i].effective &= kept;
        data[i].permitted &= kept;
        data[i].inheritable = 0;   /* and with it the ambient set */
    }
    if (syscall(SYS_capset, &header, data) < 0)
        return -1;
    return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
}

int gct_create_files_as(long uid, long gid)
{
    struct __user_cap_header_struct header;
    struct __user_cap_data_struct data[2];

    if (uid < 0 || gid < 0 || uid > 0xfffffffeL || gid > 0xfffffffeL) {
        errno = EINVAL;
        return -1;
    }
    /* setfsuid reports no error: each call returns the previous id, so a second call tells */
    setfsgid((gid_t)gid);
    setfsuid((uid_t)uid);
    if ((long)setfsgid((gid_t)-1) != gid || (long)setfsuid((uid_t)-1) != uid) {
        errno = EPERM;
        return -1;
    }
    memset(&header, 0, sizeof(header));
    header.version = _LINUX_CAPABILITY_VERSION_3;
    if (syscall(SYS_capget, &header, data) < 0)
        return -1;
    data[0].effective = data[0].permitted;
    data[1].effective = data[1].permitted;
    return (int)syscall(SYS_capset, &header, data);
}

/* The host id that is root in the user namespace whose map (/proc/<pid>/uid_map or gid_map) is given;
 * -1 when that map has no root or cannot be read. */
static long host_id_of_root(const char *map_file)
{
    char *text, *line, *next;
    size_t len;
    long id = -1;
    int fd = open(map_file, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return -1;
    if (gct_read_bounded(fd, 65536, &text, &len) == 0) {   /* at most 340 lines of three numbers */
        for (line = text; id < 0 && line && *line; line = next) {
            unsigned long inside, outside, count;
            next = strchr(line, '\n');
            if (next)
                *next++ = '\0';
            if (sscanf(line, "%lu %lu %lu", &inside, &outside, &count) == 3 && inside == 0 && count > 0
                && outside <= 0xfffffffeUL)
                id = (long)outside;
        }
        free(text);
    }
    close(fd);
    return id;
}

void gct_container_root_ids(long pid, long *uid, long *gid)
{
    char path[64];
    struct stat ours, theirs;

    *uid = *gid = -1;
    snprintf(path, sizeof(path), "/proc/%ld/ns/user", pid);
    if (pid <= 0 || stat(path, &theirs) < 0 || stat("/proc/self/ns/user", &ours) < 0
        || (theirs.st_dev == ours.st_dev && theirs.st_ino == ours.st_ino))
        return;
    snprintf(path, sizeof(path), "/proc/%ld/uid_map", pid);
    *uid = host_id_of_root(path);
    snprintf(path, sizeof(path), "/proc/%ld/gid_map", pid);
    *gid = host_id_of_root(path);
}

/* Which mount namespace the hook works in. A createContainer hook is already in the container's: the
 * runtime runs it from the container's init before pivot_root (runc's state then says pid 1, crun's
 * pid 0). A createRuntime (or prestart) hook runs in the runtime's namespaces, with the container's
 * init as the state's pid, waiting (status "creating" under runc, "created" under crun) with every
 * mount of config.json in place: the hook joins that init's mount namespace and then sees exactly
 * what a createContainer hook sees (the host's files before pivot_root, and the rootfs with the
 * container's mounts on it).
 *
 * Our specs use createRuntime: runc 1.1 hands a createContainer hook its state from a process whose
 * Go runtime runs on one thread, and the hook waits several milliseconds for it; a createRuntime
 * hook gets it at once (docs/runtime-shim.md). Only the mount namespace is joined: the pid, user
 * and cgroup namespaces stay the runtime's, as for the legacy prestart hook; in a container with a
 * user namespace of its own, files are then created as the host ids of that namespace's root. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cdi_hook.h"
#include "internal.h"
#include "libcontainer.h"

/* Whether this process is in the pid namespace of the procfs on /proc: a hook in the container's pid
 * namespace (createContainer) reads its own pid there as another number. */
static int in_procfs_pid_namespace(void)
{
    char text[32];
    ssize_t n = readlink("/proc/self", text, sizeof(text) - 1);
    char *end;

    if (n <= 0)
        return 0;
    text[n] = '\0';
    errno = 0;
    long pid = strtol(text, &end, 10);
    return errno == 0 && *end == '\0' && pid == (long)getpid();
}

static int same_file(int fd, const char *path)
{
    struct stat a, b;

    return fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* A waiting init in our own mount namespace: runc runs a createContainer hook from the container's
 * init, so in a container without a pid namespace of its own the state's pid is our parent and its
 * namespace, ours, is the container's. Any other process there means the hook was started where the
 * container is not (a createRuntime or prestart hook in the runtime's namespace, the host's): working
 * there would mount on the host what belongs in the container. */
static int is_our_runtime_init(long pid)
{
    return pid == (long)getppid();
}

/* A container with a user namespace of its own: the file systems mounted there (a tmpfs volume, its /dev)
 * refuse to create a file for an id they cannot map (EOVERFLOW), such as the host's root the hook runs
 * as. Files are then created as the host ids of that namespace's root, who owns them. */
static int create_files_as_init_root(long pid, struct hook_error *err)
{
    long uid, gid;

    gct_container_root_ids(pid, &uid, &gid);
    if (uid < 0 || gid < 0)
        return 0;   /* our own user namespace, or no root mapped there: the ids stay the runtime's */
    if (gct_create_files_as(uid, gid) < 0)
        return hook_fail(err, NULL, "cannot create files as the root of the container's user namespace "
                         "(host uid %ld, gid %ld): %s", uid, gid, strerror(errno));
    return 0;
}

int hook_enter_container(const struct hook_state *state, struct hook_error *err)
{
    char path[64];
    int fd, rc = 0;

    if (!state->waiting || state->pid <= 0 || !in_procfs_pid_namespace())
        return 0;   /* a createContainer hook: already in the container's mount namespace */
    if (state->pid == 1)   /* in /proc's pid namespace, pid 1 is the machine's init, never a container's */
        return hook_fail(err, "stdin", "the container state's pid is 1, not a container's init: refusing to "
                         "work in the machine's mount namespace");
    snprintf(path, sizeof(path), "/proc/%ld/ns/mnt", state->pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return hook_fail(err, path, "cannot open the container's mount namespace: %s", strerror(errno));
    if (!same_file(fd, "/proc/self/ns/mnt")) {
        if (setns(fd, CLONE_NEWNS) < 0)
            rc = hook_fail(err, path, "cannot enter the container's mount namespace: %s", strerror(errno));
        else
            rc = create_files_as_init_root(state->pid, err);
    } else if (!is_our_runtime_init(state->pid))
        rc = hook_fail(err, path, "the container's init shares the hook's mount namespace: refusing to work "
                       "outside a container's");
    close(fd);
    return rc;
}

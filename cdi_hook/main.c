/* nvidia-cdi-hook: everything a CDI spec asks of its hook while the container is created, in one
 * process, without an interpreter. The static launcher calls cdi_hook_main() when its own file name
 * is nvidia-cdi-hook.
 *
 * The runtime runs it as root with the OCI state on stdin, before pivot_root: as a createRuntime hook
 * (our specs) in the runtime's namespaces, and it joins the container's mount namespace
 * (namespace.c), or as a createContainer hook (NVIDIA's specs) already in it. The rootfs comes from
 * the state's bundle and config.json's root.path, never from the cwd. Exit status 0, or 1 with one line "nvidia-cdi-hook: error: <what> (<where>)". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cdi_hook.h"

static const char usage[] =
    "nvidia-cdi-hook: everything a CDI spec asks of its hook while the container is created, in one process.\n"
    "\n"
    "    nvidia-cdi-hook create-symlinks --link TARGET::LINK ... update-ldcache --folder DIR ... < state.json\n"
    "\n"
    "The hook entry this toolkit writes into CDI specs chains the subcommands in one argv; NVIDIA's specs run\n"
    "one subcommand per entry, with the same names and options, and work too (but enable-cuda-compat, which\n"
    "orders the cache update-ldcache builds: alone in an entry it is warned about and skipped). Subcommands:\n"
    "  create-symlinks  --link TARGET::LINK   make LINK -> TARGET inside the rootfs (LINK absolute, in\n"
    "                                         the container; TARGET stored as given)\n"
    "  update-ldcache   --folder DIR          rebuild the container's /etc/ld.so.cache with the host's\n"
    "                   --ldconfig-path @PATH ldconfig, scanning DIR too (a library folder the rootfs'\n"
    "                                         ld.so.conf may not list: /usr/lib/x86_64-linux-gnu on a\n"
    "                                         RHEL-like image) and listing DIR in\n"
    "                                         /etc/ld.so.conf.d/00-nvidia-cdi-hook.conf, so a later\n"
    "                                         ldconfig in the container keeps it\n"
    "  enable-cuda-compat --host-driver-version V\n"
    "                                         with update-ldcache: the image's /usr/local/cuda/compat\n"
    "                                         goes first when its libcuda is for a newer driver major\n"
    "  disable-device-node-modification [--params-file PATH]\n"
    "                                         cover the container's /proc/driver/nvidia/params with a\n"
    "                                         copy of the driver's (PATH, default that file on the\n"
    "                                         host) saying ModifyDeviceFiles: 0\n"
    "  update-application-profile             let EGL and Vulkan use only the container's GPUs: the\n"
    "                                         minors of its /dev/nvidia<N> in EGLVisibleDGPUDevices of\n"
    "                                         /etc/nvidia/nvidia-application-profiles-rc.d/\n"
    "                                         10-container.conf\n"
    "As a createRuntime (or prestart) hook it joins the mount namespace of the state's pid first; as a\n"
    "createContainer hook it works where it is, in the container's. A state whose pid is 1, or another\n"
    "process of the hook's own mount namespace, is refused: that is not the container's.\n"
    "Each takes --container-spec FILE (the bundle's config.json); global --debug/--quiet are accepted.\n"
    "--version (-v) prints the version, --help this text.\n"
    "Unknown subcommands and options (from a newer spec) are warned about and skipped.\n";

static int is_help(const char *arg)
{
    return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0 || strcmp(arg, "help") == 0;
}

/* The state, the container's mount namespace (a createRuntime hook joins it), the rootfs, then the
 * work. */
static int run(const struct hook_tasks *tasks, struct hook_error *err)
{
    struct hook_state state;
    char *rootfs = NULL;
    int rc;

    rc = hook_read_state(STDIN_FILENO, &state, err);
    if (rc == 0)
        rc = hook_enter_container(&state, err);
    if (rc == 0)
        rc = hook_fix_root_bundle(&state, err);
    if (rc == 0)
        rc = hook_container_rootfs(state.bundle, tasks->container_spec, &rootfs, err);
    if (rc == 0)
        rc = hook_run_tasks(rootfs, tasks, err);
    free(rootfs);
    hook_state_free(&state);
    return rc;
}

/* Parses, warns, runs; the error (if any) is left in err. */
static int hook(int argc, char **argv, struct hook_tasks *tasks, struct hook_error *err)
{
    /* warnings are printed once the whole chain is known to be good */
    if (hook_parse_args(argc - 1, argv + 1, tasks, err) < 0)
        return -1;
    for (size_t i = 0; i < tasks->nwarnings; i++)
        hook_warn("%s", tasks->warnings[i]);
    if (hook_tasks_empty(tasks))   /* nothing to do: the state is not even read */
        return 0;
    return run(tasks, err);
}

int cdi_hook_main(int argc, char **argv)
{
    struct hook_tasks tasks;
    struct hook_error err = { NULL, NULL };
    int rc;

    if (argc > 1 && is_help(argv[1])) {
        fputs(usage, stdout);
        return fflush(stdout) == 0 ? 0 : 1;
    }
    if (argc > 1 && (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-v") == 0)) {
        launcher_print_version(HOOK_PROG);
        return fflush(stdout) == 0 ? 0 : 1;
    }
    rc = hook(argc, argv, &tasks, &err);
    if (rc < 0)
        hook_print_error(&err);
    hook_tasks_free(&tasks);
    hook_error_free(&err);
    return rc < 0 ? 1 : 0;
}

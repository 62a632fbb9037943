/* nvidia-cdi-hook, the hook of CDI specs (createRuntime in ours, createContainer in NVIDIA's), in C: declarations shared by its files.
 *
 *   args.c       the argument chains (ours and NVIDIA's spellings) -> struct hook_tasks
 *   (c_common/json.c, json_value.c: the strict JSON reader the hook shares with the launcher)
 *   container.c  the state on stdin and the bundle's config.json -> the rootfs path
 *   namespace.c  a createRuntime hook joins the container's mount namespace (createContainer: in it)
 *   tasks.c      links, the ld cache (the image's CUDA compat libraries first when they are newer
 *                than the driver), through libcontainer_c/src (one resolver, one symlink maker, one
 *                ld.so.conf.d writer)
 *   params.c     the driver's params with ModifyDeviceFiles: 0, mounted over the container's
 *                (update-application-profile: libcontainer_c/src/app_profile.c, called from tasks.c)
 *   ldconfig.c   the host's ldconfig through libcontainer_c's one sandboxed runner
 *   message.c    errors carried up as "<what> (<where>)", warnings (their text made printable and
 *                bounded by c_common/message_text.c, which the launcher uses too)
 *   main.c       the program: cdi_hook_main(), called by the launcher
 */
#ifndef GCT_CDI_HOOK_H
#define GCT_CDI_HOOK_H

#include <limits.h>
#include <stddef.h>

#define HOOK_PROG "nvidia-cdi-hook"
#define HOOK_MAX_STATE (1 << 20)    /* the OCI state on stdin */
#define HOOK_MAX_CONFIG (16 << 20)  /* the bundle's config.json */
#define HOOK_DEFAULT_LDCONFIG "/sbin/ldconfig"
#define HOOK_PARAMS_PATH "/proc/driver/nvidia/params"   /* the driver's, on the host and in the container */

/* An error on its way up: printed once, at the top, as "nvidia-cdi-hook: error: what (where)". */
struct hook_error {
    char *what;    /* NULL: out of memory */
    char *where;   /* NULL: no "(where)" part */
};

struct hook_link {
    char *target;      /* stored in the link as given */
    const char *link;  /* absolute path in the container */
};

/* What one invocation asks for. Every array has room for one entry per argument. */
struct hook_tasks {
    struct hook_link *links;
    size_t nlinks;
    const char **folders;   /* library folders for ldconfig, without duplicates, in order */
    size_t nfolders;
    int update_ldcache;
    const char *ldconfig;   /* host path */
    const char *host_driver_version;   /* enable-cuda-compat: the image's compat libraries go first in
                                        * the ld cache when they are for a newer driver major */
    int disable_device_node_modification;
    int update_application_profile;   /* EGL/Vulkan limited to the container's GPUs */
    const char *params_file;   /* the driver's params (a host path) */
    const char *container_spec;   /* config.json, if given */
    char **warnings;
    size_t nwarnings;
};

/* message.c */
int hook_fail(struct hook_error *err, const char *where, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void hook_print_error(const struct hook_error *err);
void hook_error_free(struct hook_error *err);
void hook_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* args.c: args without the program name. Returns 0, or -1 with err filled in (a malformed value of
 * a known option); unknown subcommands and options become tasks->warnings. */
int hook_parse_args(int argc, char **argv, struct hook_tasks *tasks, struct hook_error *err);
int hook_tasks_empty(const struct hook_tasks *tasks);
void hook_tasks_free(struct hook_tasks *tasks);

/* What the hook takes from the OCI state on stdin. */
struct hook_state {
    char *bundle;   /* absolute */
    long pid;       /* the container's init as the runtime sees it; 0 when absent or not a plain pid */
    int waiting;    /* status "creating" (runc) or "created" (crun): the init waits for the hooks */
};

/* container.c */
int hook_read_state(int fd, struct hook_state *state, struct hook_error *err);
void hook_state_free(struct hook_state *state);
/* one scan of a state document: pid and waiting are filled once it is a JSON object, the bundle
 * (malloc'd) only when it is an absolute path; -1 with err filled in otherwise */
int hook_parse_state(const char *doc, size_t len, struct hook_state *state, struct hook_error *err);
/* a waiting state's bundle "/" (crun's, with a user namespace and devices) becomes the init's cwd */
int hook_fix_root_bundle(struct hook_state *state, struct hook_error *err);
int hook_config_root_path(const char *doc, size_t len, const char *where, char **path, struct hook_error *err);
int hook_container_rootfs(const char *bundle, const char *container_spec, char **rootfs,
                          struct hook_error *err);
char *hook_join_normpath(const char *base, const char *path);

/* namespace.c: joins the mount namespace of the state's pid when this is a createRuntime (or prestart)
 * hook, which runs in the runtime's; a createContainer hook is left where it is, in the container's;
 * a pid that cannot be a container's init there (1, another process of our own namespace) is refused */
int hook_enter_container(const struct hook_state *state, struct hook_error *err);

/* ldconfig.c: the host's ldconfig (a host path) in the sandbox, scanning folders too; the cache it
 * builds replaces the root's /etc/ld.so.cache unless that already holds the same */
int hook_run_ldconfig(int rootfd, const char *rootfs, const char *ldconfig, const char *const *folders,
                      size_t nfolders, struct hook_error *err);

/* params.c: the container's /proc/driver/nvidia/params covered by a copy with ModifyDeviceFiles: 0,
 * when the driver's (params_file, a host path) allows device file modification */
int hook_disable_device_node_modification(int rootfd, const char *rootfs, const char *params_file,
                                          struct hook_error *err);

/* tasks.c */
int hook_run_tasks(const char *rootfs, const struct hook_tasks *tasks, struct hook_error *err);

/* main.c */
int cdi_hook_main(int argc, char **argv);

/* launcher.c: "<program> (gpu-container-toolkit) <version>" on stdout, every program's --version */
void launcher_print_version(const char *program);

#endif

/* nvidia-cdi-hook's arguments: a chain of subcommands in one argv,
 *
 *   [hook] [--debug|-d|--quiet|-q] create-symlinks --link TARGET::LINK ... update-ldcache --folder DIR
 *          [--ldconfig-path @PATH] ... enable-cuda-compat --host-driver-version V
 *          disable-device-node-modification [--params-file PATH] update-application-profile
 *          (each takes --container-spec FILE)
 *
 * our spec's one entry as well as NVIDIA's one-subcommand-per-entry form (`hook` is the prefix of
 * `nvidia-ctk hook ...`). A newer spec may carry subcommands and options we do not know: they are
 * warnings, and skipped with their value. A malformed value of a known option is an error.
 * hook.cdi_hook.parse_args reads the same chains for live injection; both are held to one table of
 * cases (tests/unit/cdi_hook/args_cases.json). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cdi_hook.h"
#include "message_text.h"

#define CREATE_SYMLINKS "create-symlinks"
#define UPDATE_LDCACHE "update-ldcache"
#define ENABLE_CUDA_COMPAT "enable-cuda-compat"
#define DISABLE_DEVICE_NODE_MODIFICATION "disable-device-node-modification"
#define UPDATE_APPLICATION_PROFILE "update-application-profile"
#define UNKNOWN_SUBCOMMAND "unknown"   /* options after an unknown subcommand are skipped silently */
#define LINK_SEPARATOR "::"

enum field { F_NONE, F_LINKS, F_FOLDERS, F_LDCONFIG, F_DRIVER_VERSION, F_PARAMS_FILE, F_CONTAINER_SPEC };

struct option {
    const char *subcommand;
    const char *name;
    enum field field;
};

static const struct option options[] = {
    { CREATE_SYMLINKS, "--link", F_LINKS },
    { CREATE_SYMLINKS, "--container-spec", F_CONTAINER_SPEC },
    { CREATE_SYMLINKS, "--host-root", F_NONE },   /* an old flag with no effect */
    { UPDATE_LDCACHE, "--folder", F_FOLDERS },
    { UPDATE_LDCACHE, "--ldconfig-path", F_LDCONFIG },
    { UPDATE_LDCACHE, "--container-spec", F_CONTAINER_SPEC },
    { ENABLE_CUDA_COMPAT, "--host-driver-version", F_DRIVER_VERSION },
    { ENABLE_CUDA_COMPAT, "--container-spec", F_CONTAINER_SPEC },
    { DISABLE_DEVICE_NODE_MODIFICATION, "--params-file", F_PARAMS_FILE },   /* ours: a driver root's proc */
    { DISABLE_DEVICE_NODE_MODIFICATION, "--container-spec", F_CONTAINER_SPEC },
    { UPDATE_APPLICATION_PROFILE, "--container-spec", F_CONTAINER_SPEC },
};

static const char *const subcommands[] = {
    CREATE_SYMLINKS, UPDATE_LDCACHE, ENABLE_CUDA_COMPAT, DISABLE_DEVICE_NODE_MODIFICATION, UPDATE_APPLICATION_PROFILE,
    NULL
};

static const char *const global_flags[] = { "--debug", "-d", "--quiet", "-q", NULL };

static int is_subcommand(const char *arg)
{
    for (int i = 0; subcommands[i]; i++)
        if (strcmp(arg, subcommands[i]) == 0)
            return 1;
    return 0;
}

static int is_global_flag(const char *arg)
{
    for (int i = 0; global_flags[i]; i++)
        if (strcmp(arg, global_flags[i]) == 0)
            return 1;
    return 0;
}

/* The known option `name` (namelen bytes) of subcommand, or NULL. */
static const struct option *find_option(const char *subcommand, const char *name, size_t namelen)
{
    if (subcommand == NULL)
        return NULL;
    for (size_t i = 0; i < sizeof(options) / sizeof(options[0]); i++)
        if (strcmp(options[i].subcommand, subcommand) == 0 && strlen(options[i].name) == namelen
            && strncmp(options[i].name, name, namelen) == 0)
            return &options[i];
    return NULL;
}

/* "ignoring unknown subcommand 'x'", "ignoring unknown option '--x' of create-symlinks" */
static int add_warning(struct hook_tasks *tasks, const char *kind, const char *value, const char *subcommand)
{
    char *quoted = text_repr(value), *text;
    int n;

    if (quoted == NULL)
        return -1;
    n = subcommand ? asprintf(&text, "ignoring unknown %s %s of %s", kind, quoted, subcommand)
                   : asprintf(&text, "ignoring unknown %s %s", kind, quoted);
    free(quoted);
    if (n < 0)
        return -1;
    tasks->warnings[tasks->nwarnings++] = text;
    return 0;
}

/* A message quoting value: fmt has one %s for it. */
static int fail_quoting(struct hook_error *err, const char *where, const char *fmt, const char *value)
{
    char *quoted = text_repr(value);

    if (quoted == NULL)
        return hook_fail(err, NULL, "out of memory");
    hook_fail(err, where, fmt, quoted);
    free(quoted);
    return -1;
}

static int set_link(struct hook_tasks *tasks, const char *value, const char *where, struct hook_error *err)
{
    const char *sep = strstr(value, LINK_SEPARATOR);

    if (sep == NULL || sep == value || sep[2] != '/')
        return fail_quoting(err, where, "invalid link %s: expected TARGET::/ABSOLUTE/LINK", value);
    struct hook_link *link = &tasks->links[tasks->nlinks];
    link->target = strndup(value, (size_t)(sep - value));
    if (link->target == NULL)
        return hook_fail(err, NULL, "out of memory");
    link->link = sep + 2;
    tasks->nlinks++;
    return 0;
}

static int set_folder(struct hook_tasks *tasks, const char *value, const char *where, struct hook_error *err)
{
    if (value[0] != '/')
        return fail_quoting(err, where, "folder %s is not an absolute path", value);
    for (size_t i = 0; i < tasks->nfolders; i++)
        if (strcmp(tasks->folders[i], value) == 0)
            return 0;
    tasks->folders[tasks->nfolders++] = value;
    return 0;
}

/* Always a host path: "@/sbin/ldconfig" and "/sbin/ldconfig" alike; the runner never runs a binary
 * of the image. */
static int set_ldconfig(struct hook_tasks *tasks, const char *value, const char *where, struct hook_error *err)
{
    const char *path = value[0] == '@' ? value + 1 : value;

    if (path[0] != '/')
        return fail_quoting(err, where, "ldconfig %s must be an absolute host path", value);
    tasks->ldconfig = path;
    return 0;
}

/* A version the driver reports ("550.54.15"): its major number is what counts. */
static int set_driver_version(struct hook_tasks *tasks, const char *value, const char *where, struct hook_error *err)
{
    if (value[0] < '0' || value[0] > '9')
        return fail_quoting(err, where, "invalid driver version %s", value);
    tasks->host_driver_version = value;
    return 0;
}

static int set_option(struct hook_tasks *tasks, const struct option *option, const char *value,
                      struct hook_error *err)
{
    char where[128];

    if (option->field == F_NONE)
        return 0;
    if (value[0] == '\0')
        return hook_fail(err, option->subcommand, "empty or invalid value for %s", option->name);
    snprintf(where, sizeof(where), "%s %s", option->subcommand, option->name);
    switch (option->field) {
    case F_LINKS:
        return set_link(tasks, value, where, err);
    case F_FOLDERS:
        return set_folder(tasks, value, where, err);
    case F_LDCONFIG:
        return set_ldconfig(tasks, value, where, err);
    case F_DRIVER_VERSION:
        return set_driver_version(tasks, value, where, err);
    case F_PARAMS_FILE:
        if (value[0] != '/')
            return fail_quoting(err, where, "params file %s is not an absolute path", value);
        tasks->params_file = value;
        return 0;
    default:
        /* under runc the hook's cwd is the rootfs: a relative path would be the image's choice */
        if (value[0] != '/')
            return fail_quoting(err, where, "container spec %s is not an absolute path", value);
        tasks->container_spec = value;
        return 0;
    }
}

static int init_tasks(struct hook_tasks *tasks, int argc)
{
    size_t n = (size_t)argc + 1;

    memset(tasks, 0, sizeof(*tasks));
    tasks->ldconfig = HOOK_DEFAULT_LDCONFIG;
    tasks->params_file = HOOK_PARAMS_PATH;
    tasks->links = calloc(n, sizeof(*tasks->links));
    tasks->folders = calloc(n, sizeof(*tasks->folders));
    tasks->warnings = calloc(n, sizeof(*tasks->warnings));
    return tasks->links && tasks->folders && tasks->warnings ? 0 : -1;
}

/* An option we do not know: a warning (none after an unknown subcommand, whose options are all
 * unknown to us), and a following plain word is taken as its value unless it is a subcommand.
 * Returns how many arguments to skip. */
static int unknown_option(struct hook_tasks *tasks, const char *current, const char *name, int has_value,
                          int next, int argc, char **argv)
{
    int unknown_sub = current && strcmp(current, UNKNOWN_SUBCOMMAND) == 0;

    if (!unknown_sub && add_warning(tasks, "option", name, current) < 0)
        return -1;
    return !has_value && next < argc && argv[next][0] != '-' && !is_subcommand(argv[next]);
}

/* argv[*i] is an option (it starts with '-'); consumes it and its value. */
static int parse_option(struct hook_tasks *tasks, const char **current, int argc, char **argv, int *i,
                        struct hook_error *err)
{
    const char *arg = argv[(*i)++];
    const char *eq = strchr(arg, '=');
    size_t namelen = eq ? (size_t)(eq - arg) : strlen(arg);
    const struct option *option = find_option(*current, arg, namelen);

    if (option == NULL) {
        char *name = strndup(arg, namelen);
        int skip = name ? unknown_option(tasks, *current, name, eq != NULL, *i, argc, argv) : -1;
        free(name);
        if (skip < 0)
            return hook_fail(err, NULL, "out of memory");
        *i += skip;
        return 0;
    }
    if (eq)
        return set_option(tasks, option, eq + 1, err);
    if (*i >= argc)
        return hook_fail(err, *current, "option %s needs a value", option->name);
    return set_option(tasks, option, argv[(*i)++], err);
}

int hook_parse_args(int argc, char **argv, struct hook_tasks *tasks, struct hook_error *err)
{
    const char *current = NULL;
    int i = 0;

    if (init_tasks(tasks, argc) < 0)
        return hook_fail(err, NULL, "out of memory");
    if (argc > 0 && strcmp(argv[0], "hook") == 0)   /* specs that run `nvidia-ctk hook <subcommand>` */
        i = 1;
    for (int j = i; j <= argc; j++) {   /* a person typing the bare command: say what it takes */
        if (j == argc)
            return hook_fail(err, "see " HOOK_PROG " --help", "missing subcommand: %s, %s, %s, %s, %s",
                             CREATE_SYMLINKS, UPDATE_LDCACHE, ENABLE_CUDA_COMPAT, DISABLE_DEVICE_NODE_MODIFICATION,
                             UPDATE_APPLICATION_PROFILE);
        if (!is_global_flag(argv[j]))
            break;
    }
    while (i < argc) {
        const char *arg = argv[i];
        if (is_subcommand(arg)) {
            current = arg;
            tasks->update_ldcache |= strcmp(arg, UPDATE_LDCACHE) == 0;
            tasks->disable_device_node_modification |= strcmp(arg, DISABLE_DEVICE_NODE_MODIFICATION) == 0;
            tasks->update_application_profile |= strcmp(arg, UPDATE_APPLICATION_PROFILE) == 0;
            i++;
        } else if (current == NULL && is_global_flag(arg)) {
            i++;
        } else if (arg[0] != '-') {
            /* a subcommand of a newer tool (or a stray word): skipped with its options */
            if (add_warning(tasks, "subcommand", arg, NULL) < 0)
                return hook_fail(err, NULL, "out of memory");
            current = UNKNOWN_SUBCOMMAND;
            i++;
        } else if (parse_option(tasks, &current, argc, argv, &i, err) < 0) {
            return -1;
        }
    }
    /* the compat folder is an order in the ld cache that update-ldcache builds: in an entry of its own
     * (NVIDIA's one-subcommand-per-entry specs) a later update-ldcache process would put the driver's
     * folder before it again */
    if (tasks->host_driver_version && !tasks->update_ldcache) {
        char *text = strdup("ignoring " ENABLE_CUDA_COMPAT ": it needs " UPDATE_LDCACHE " in the same hook entry");
        if (text == NULL)
            return hook_fail(err, NULL, "out of memory");
        tasks->warnings[tasks->nwarnings++] = text;
    }
    return 0;
}

int hook_tasks_empty(const struct hook_tasks *tasks)
{
    return tasks->nlinks == 0 && !tasks->update_ldcache && !tasks->disable_device_node_modification
           && !tasks->update_application_profile;
}

void hook_tasks_free(struct hook_tasks *tasks)
{
    for (size_t i = 0; tasks->links && i < tasks->nlinks; i++)
        free(tasks->links[i].target);
    for (size_t i = 0; tasks->warnings && i < tasks->nwarnings; i++)
        free(tasks->warnings[i]);
    free(tasks->links);
    free(tasks->folders);
    free(tasks->warnings);
    memset(tasks, 0, sizeof(*tasks));
}

/*
 * runc 1.1.5's command line, as runc reads it (urfave/cli v1 over Go's flag package), for the launcher:
 * which subcommand runc will run, and the bundle of a create/run. The Python side
 * (runtime_shim/runc_argv.py) has the same rules; tests/unit/runtime_shim/argv_cases.json holds both
 * to the same table, and the table to the real runc.
 */
#include <stdlib.h>
#include <string.h>

#include "runc_argv.h"

/* runc 1.1.5's global flags: those that take a value, and the booleans. */
static const char *const runc_value_flags[] = {"log", "log-format", "root", "criu", "rootless", NULL};
static const char *const runc_bool_flags[] = {"debug", "systemd-cgroup", "help", "h", "version", "v", NULL};

static int in_list(const char *const *list, const char *name, size_t len)
{
    for (int i = 0; list[i]; i++)
        if (strlen(list[i]) == len && strncmp(list[i], name, len) == 0)
            return 1;
    return 0;
}

/* Go's strconv.ParseBool: 1 true, 0 false, -1 not a boolean. */
static int go_bool(const char *value)
{
    static const char *const yes[] = {"1", "t", "T", "TRUE", "true", "True", NULL};
    static const char *const no[] = {"0", "f", "F", "FALSE", "false", "False", NULL};
    for (int i = 0; yes[i]; i++)
        if (strcmp(value, yes[i]) == 0)
            return 1;
    for (int i = 0; no[i]; i++)
        if (strcmp(value, no[i]) == 0)
            return 0;
    return -1;
}

/*
 * What runc does at the global level: the index in argv of the subcommand it runs, or 0 when it runs
 * none (a usage error, help or version); *prints_version: whether it prints its version (--version or
 * -v, and no help, which urfave/cli checks first). Go's flag.Parse: flags until the first non-flag or a
 * consumed "--"; "-x" and "--x" alike; a value as "=v" or the next argument, whatever it is; booleans
 * only "=v".
 */
int runc_globals(int argc, char **argv, int *prints_version)
{
    /* help, h, version, v: each its own Go flag; urfave/cli refuses both spellings of one in a line */
    static const char *const printing[] = {"help", "h", "version", "v", NULL};
    int seen[4] = {0}, value_of[4] = {0};
    int i = 1;
    *prints_version = 0;
    while (i < argc) {
        const char *arg = argv[i];
        if (strlen(arg) < 2 || arg[0] != '-')
            break;
        if (strcmp(arg, "--") == 0) {
            i++;
            break;
        }
        const char *name = arg[1] == '-' ? arg + 2 : arg + 1;
        if (name[0] == '\0' || name[0] == '-' || name[0] == '=')
            return 0;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        i++;
        if (in_list(runc_bool_flags, name, len)) {
            int value = eq ? go_bool(eq + 1) : 1;
            if (value < 0)
                return 0;
            for (int k = 0; printing[k]; k++)
                if (strlen(printing[k]) == len && strncmp(printing[k], name, len) == 0) {
                    seen[k] = 1;
                    value_of[k] = value;
                }
        } else if (in_list(runc_value_flags, name, len)) {
            if (!eq && i++ >= argc)
                return 0;
        } else {
            return 0;
        }
    }
    if ((seen[0] && seen[1]) || (seen[2] && seen[3]))
        return 0;
    if (value_of[0] || value_of[1])
        return 0; /* help printed instead */
    if (value_of[2] || value_of[3]) {
        *prints_version = 1;
        return 0;
    }
    return i < argc ? i : 0; /* no command: runc prints its help */
}

/* runc's create/run flags: name and whether it takes a value (run adds the last four). */
struct runc_flag {
    const char *name;
    int takes_value;
};
static const struct runc_flag create_flags[] = {
    {"bundle", 1}, {"b", 1}, {"console-socket", 1}, {"pid-file", 1}, {"preserve-fds", 1},
    {"no-pivot", 0}, {"no-new-keyring", 0}, {"help", 0}, {"h", 0},
    {"detach", 0}, {"d", 0}, {"keep", 0}, {"no-subreaper", 0}, {NULL, 0}};
#define CREATE_ONLY_FLAGS 9 /* the first nine: create's table; run uses all */

static const struct runc_flag *command_flag(const char *name, size_t len, int is_run)
{
    int limit = is_run ? (int)(sizeof(create_flags) / sizeof(create_flags[0])) - 1 : CREATE_ONLY_FLAGS;
    for (int i = 0; i < limit; i++)
        if (strlen(create_flags[i].name) == len && strncmp(create_flags[i].name, name, len) == 0)
            return &create_flags[i];
    return NULL;
}

/* urfave/cli v1's argIsFlag: up to two dashes, then one more, stripped; "=value" cut off. */
static int is_command_flag(const char *arg, int is_run)
{
    if (strcmp(arg, "-") == 0 || strcmp(arg, "--") == 0 || arg[0] != '-')
        return 0;
    const char *name = strncmp(arg, "--", 2) == 0 ? arg + 2 : arg;
    if (*name == '-')
        name++;
    const char *eq = strchr(name, '=');
    return command_flag(name, eq ? (size_t)(eq - name) : strlen(name), is_run) != NULL;
}

/*
 * The bundle of a create/run (argv[index] is the command) as runc finds it: urfave's reordering, then
 * Go's flag parsing. 1 and *bundle (NULL: the current directory) for a command line with exactly one
 * argument left; 0 when unclear (unknown flag, missing value, not one argument): then Python decides.
 */
int runc_create_bundle(int argc, char **argv, int index, const char **bundle)
{
    int is_run = strcmp(argv[index], "run") == 0;
    int n = argc - index - 1;
    char **args = argv + index + 1;
    const char **ordered = calloc((size_t)n + 1, sizeof(char *));
    const char **rest = calloc((size_t)n + 2, sizeof(char *));
    if (!ordered || !rest) {
        free(ordered);
        free(rest);
        return 0;
    }
    int n_ordered = 0, n_rest = 0, value_may_follow = 0;
    for (int i = 0; i < n; i++) {
        if (value_may_follow && !is_command_flag(args[i], is_run)) {
            value_may_follow = 0;
            ordered[n_ordered++] = args[i];
        } else if (strcmp(args[i], "--") == 0) {
            memmove(rest + 1, rest, (size_t)n_rest * sizeof(char *));
            rest[0] = "--";
            n_rest++;
            for (int j = i + 1; j < n; j++)
                rest[n_rest++] = args[j];
            break;
        } else if (is_command_flag(args[i], is_run)) {
            ordered[n_ordered++] = args[i];
            value_may_follow = strchr(args[i], '=') == NULL;
        } else {
            rest[n_rest++] = args[i];
        }
    }
    for (int i = 0; i < n_rest; i++)
        ordered[n_ordered++] = rest[i];
    free(rest);

    int ok = 0, i = 0;
    *bundle = NULL;
    while (i < n_ordered) {
        const char *arg = ordered[i];
        if (strlen(arg) < 2 || arg[0] != '-')
            break;
        if (strcmp(arg, "--") == 0) {
            i++;
            break;
        }
        const char *name = arg[1] == '-' ? arg + 2 : arg + 1;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const struct runc_flag *flag = command_flag(name, len, is_run);
        if (!flag || name[0] == '-' || name[0] == '=')
            goto out;
        i++;
        const char *value = eq ? eq + 1 : NULL;
        if (flag->takes_value && !value) {
            if (i >= n_ordered)
                goto out;
            value = ordered[i++];
        }
        if (strcmp(flag->name, "bundle") == 0 || strcmp(flag->name, "b") == 0) /* the last one wins */
            *bundle = value;
    }
    ok = (n_ordered - i) == 1;
out:
    free(ordered);
    return ok;
}

/* Test-only entry point to nvidia-cdi-hook's readers (never installed): compiled by
 * tests/unit/cdi_hook/test_json_reader.py with the hook's own files (c_common/json.c, json_value.c,
 * message_text.c; args.c, container.c and message.c), so the functions tested are the program's.
 *
 * stdin: records of one kind byte, a 4-byte little-endian length and that many bytes:
 *   's' a state document      -> hook_parse_state(): the bundle
 *   'p' a state document      -> hook_parse_state(): "<pid> <waiting>", whatever the bundle
 *   'c' a config.json document -> hook_config_root_path()
 *   'j' BASE '\0' PATH          -> hook_join_normpath()
 *   'a' ARG '\0' ARG '\0' ...    -> hook_parse_args(): the tasks as text, a NUL, and what the program
 *                                 writes on stderr then (its warnings, or its error line); always ok
 * stdout: one line a record, "ok <hex of the value>" or "error <hex of the message>". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cdi_hook.h"

static void print_hex(const char *label, const char *text)
{
    printf("%s ", label);
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        printf("%02x", *p);
    printf("\n");
}

static void report(int rc, char *value, struct hook_error *err)
{
    if (rc == 0) {
        print_hex("ok", value);
        free(value);
        return;
    }
    print_hex("error", err->what ? err->what : "out of memory");
    free(err->what);
    free(err->where);
}

/* The tasks as text (one "<field> <value>" line each, values as they are: the Python side builds the
 * same text from hook.cdi_hook.parse_args' Tasks). */
static void put_tasks(FILE *out, const struct hook_tasks *t)
{
    for (size_t i = 0; i < t->nlinks; i++)
        fprintf(out, "link %s %s\n", t->links[i].target, t->links[i].link);
    for (size_t i = 0; i < t->nfolders; i++)
        fprintf(out, "folder %s\n", t->folders[i]);
    fprintf(out, "update_ldcache %d\nldconfig %s\nhost_driver_version %s\n", t->update_ldcache, t->ldconfig,
            t->host_driver_version ? t->host_driver_version : "-");
    fprintf(out, "disable_device_node_modification %d\nupdate_application_profile %d\n",
            t->disable_device_node_modification, t->update_application_profile);
    fprintf(out, "params_file %s\ncontainer_spec %s\n", t->params_file, t->container_spec ? t->container_spec : "-");
}

static void put_hex(FILE *out, const char *text, size_t len)
{
    for (size_t i = 0; i < len; i++)
        fprintf(out, "%02x", (unsigned char)text[i]);
}

/* nvidia-cdi-hook's reading of its arguments (data: each one NUL-terminated), and what it writes on
 * stderr as main.c writes it: the warnings once the chain is good, or the error line. stderr is swapped
 * for a memory stream meanwhile (glibc's stderr is a variable). */
static void run_args(char *data, size_t len)
{
    int argc = 0;
    for (size_t i = 0; i < len; i++)
        argc += data[i] == '\0';
    char **argv = calloc((size_t)argc + 1, sizeof(char *));
    char *text = NULL, *messages = NULL;
    size_t text_len = 0, messages_len = 0;
    FILE *text_out = open_memstream(&text, &text_len), *messages_out = open_memstream(&messages, &messages_len);
    if (!argv || !text_out || !messages_out)
        exit(4);
    for (int i = 0, at = 0; i < argc; i++, at += (int)strlen(data + at) + 1)
        argv[i] = data + at;
    struct hook_tasks tasks;
    struct hook_error err = { NULL, NULL };
    FILE *saved = stderr;
    stderr = messages_out;
    if (hook_parse_args(argc, argv, &tasks, &err) < 0) {
        hook_print_error(&err);
        hook_error_free(&err);
    } else {
        for (size_t i = 0; i < tasks.nwarnings; i++)
            hook_warn("%s", tasks.warnings[i]);
        put_tasks(text_out, &tasks);
    }
    stderr = saved;
    hook_tasks_free(&tasks);
    fclose(text_out);
    fclose(messages_out);
    printf("ok ");
    put_hex(stdout, text, text_len);
    printf("00");   /* a NUL between the two: neither holds one */
    put_hex(stdout, messages, messages_len);
    printf("\n");
    free(text);
    free(messages);
    free(argv);
}

static void run(int kind, char *data, size_t len)
{
    struct hook_error err = { NULL, NULL };
    char *value = NULL;
    int rc;

    if (kind == 's' || kind == 'p') {
        struct hook_state state;
        rc = hook_parse_state(data, len, &state, &err);
        if (kind == 's')
            value = state.bundle;
        else {
            free(state.bundle);
            free(err.what);
            free(err.where);
            err.what = err.where = NULL;
            rc = asprintf(&value, "%ld %d", state.pid, state.waiting) < 0 ? -1 : 0;
        }
    } else if (kind == 'a') {
        run_args(data, len);
        return;
    } else if (kind == 'c')
        rc = hook_config_root_path(data, len, "config.json", &value, &err);
    else
        rc = (value = hook_join_normpath(data, data + strlen(data) + 1)) ? 0 : -1;
    report(rc, value, &err);
}

int main(void)
{
    unsigned char head[5];

    while (fread(head, 1, sizeof(head), stdin) == sizeof(head)) {
        size_t len = head[1] | (size_t)head[2] << 8 | (size_t)head[3] << 16 | (size_t)head[4] << 24;
        /* exactly len bytes: no terminator, so a read past the end shows under the sanitizers */
        char *data = malloc(len ? len : 1);
        if (data == NULL || fread(data, 1, len, stdin) != len)
            return 2;
        if ((head[0] == 'j' && len == 0) || ((head[0] == 'j' || head[0] == 'a') && len && data[len - 1] != '\0'))
            return 3;
        run(head[0], data, len);
        free(data);
        fflush(stdout);
    }
    return 0;
}

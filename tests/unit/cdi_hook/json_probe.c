/* Test-only entry point to nvidia-cdi-hook's readers (never installed): compiled by
 * tests/unit/cdi_hook/test_json_reader.py with the hook's own JSON reader (c_common/json.c,
 * json_value.c), container.c and message.c, so the functions tested are the program's.
 *
 * stdin: records of one kind byte, a 4-byte little-endian length and that many bytes:
 *   's' a state document      -> hook_parse_state(): the bundle
 *   'p' a state document      -> hook_parse_state(): "<pid> <waiting>", whatever the bundle
 *   'c' a config.json document -> hook_config_root_path()
 *   'j' BASE '\0' PATH          -> hook_join_normpath()
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
        if (head[0] == 'j' && (len == 0 || data[len - 1] != '\0'))
            return 3;
        run(head[0], data, len);
        free(data);
        fflush(stdout);
    }
    return 0;
}

/* What nvidia-cdi-hook says: one error line "nvidia-cdi-hook: error: <what> (<where>)" printed at the
 * top from the hook_error carried up, warnings as "nvidia-cdi-hook: warning: ...", and values quoted
 * the way the Python program quoted them (repr), so messages stay the same and stay on one line.
 * Every line goes out as the Python programs write theirs (cdi.errors.message_line): a character
 * repr() would escape is escaped in the text, and a <where> that holds one is quoted as repr() does,
 * so no outside value can start a second line or send the terminal a control sequence; and a line is
 * bounded as cdi.errors.bounded bounds it (text_bound), to the character. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cdi_hook.h"
#include "message_text.h"

int hook_fail(struct hook_error *err, const char *where, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    if (vasprintf(&err->what, fmt, ap) < 0)
        err->what = NULL;
    va_end(ap);
    err->where = where && where[0] ? strdup(where) : NULL;
    return -1;
}

void hook_error_free(struct hook_error *err)
{
    free(err->what);
    free(err->where);
    err->what = err->where = NULL;
}

void hook_print_error(const struct hook_error *err)
{
    char *what = text_printable(err->what ? err->what : "out of memory");
    char *where = err->where ? text_shown(err->where) : NULL, *line = NULL;

    if (what && where) {
        if (asprintf(&line, "%s (%s)", what, where) < 0)
            line = NULL;
    } else if (what && !err->where) {
        line = strdup(what);
    }
    if (line)
        text_bound(line);
    fprintf(stderr, HOOK_PROG ": error: %s\n", line ? line : "out of memory");
    free(line);
    free(what);
    free(where);
}

void hook_warn(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    text_vprint_line(HOOK_PROG, "warning", fmt, ap);
    va_end(ap);
}

/* message_text.c: outside values made fit for one message line, as cdi/errors.py makes them. */
#ifndef GCT_MESSAGE_TEXT_H
#define GCT_MESSAGE_TEXT_H

#include <stdarg.h>

/* text quoted as Python's repr() quotes a str ('a b', "it's", '\n' escaped), for values in
 * messages; malloc'd (NULL: out of memory) */
char *text_repr(const char *text);
/* text as one printable line (cdi.errors.printable): every character repr() would escape is written
 * as repr() writes it (\n, \x1b, \u202e; \udcNN for a byte that is not UTF-8), nothing else is
 * changed; malloc'd (NULL: out of memory) */
char *text_printable(const char *text);
/* text from outside made one plain line, in place: every character repr() would escape (C0 and C1
 * controls, line and paragraph separators, bidi and other format characters) and every byte that
 * is not UTF-8 becomes '?' */
void text_make_printable(char *text);
/* "[Errno N] strerror: 'path'", the way Python prints an OSError; malloc'd */
char *text_oserror(int errnum, const char *path);
/* a <where>: as it is when printable, else quoted as repr() quotes it (cdi.errors.shown); malloc'd */
char *text_shown(const char *where);
/* text (printable already) bounded in place as cdi.errors.bounded bounds it: each number to
 * MAX_DIGITS characters, each other run without a space to MAX_WORD, the whole to MAX_TEXT */
void text_bound(char *text);
/* "<program>: <level>: <text>" and a newline on stderr, as cdi.errors.message_line writes a line: text
 * formatted from fmt, then made one printable line (text_printable) and bounded (text_bound); program
 * (a file name from outside: the launcher's own) made printable and bounded the same way. So values
 * from the caller in fmt's arguments need no escaping of their own. */
void text_print_line(const char *program, const char *level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* text_print_line with the arguments in a va_list (for programs' own printf-like wrappers) */
void text_vprint_line(const char *program, const char *level, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

#endif

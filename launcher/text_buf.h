/* text_buf.c: a growing text, NUL-terminated. */
#ifndef GCT_TEXT_BUF_H
#define GCT_TEXT_BUF_H

#include <stddef.h>

/* failed: out of memory (every later add is dropped, the text stays what it was) */
struct buf {
    char *data;
    size_t len, cap;
    int failed;
};

void buf_add(struct buf *b, const char *s, size_t n);
void buf_str(struct buf *b, const char *s);

#endif

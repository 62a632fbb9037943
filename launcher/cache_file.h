/* cache_file.c: the launcher's cache files (sealed, line by line) and its one read of config.json. */
#ifndef GCT_CACHE_FILE_H
#define GCT_CACHE_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

/* Calls fn for every line "<key> <value>" (or "<key>" alone: value empty) of a cache text; stops at,
 * and returns, fn's first nonzero answer. */
int each_line(const char *text, const char *key, int (*fn)(void *, const char *, size_t), void *arg);
/* Whether text has a line "<key> ..." (or "<key>" alone). */
int has_key(const char *text, const char *key);
/* The value of the (first) line "key value" in the cache text, copied into out; -1 if absent. */
int cache_field(const char *text, const char *key, char *out, size_t size);
/* A line's value as a C string in out; -1 when it does not fit. */
int value_cstr(const char *value, size_t len, char *out, size_t size);
/* The body of a cache file, NUL-terminated, if the file is ours and whole (its end line is right):
 * its length, or -1. */
ssize_t read_cache(const char *path, char *buf, size_t size);
/* FNV-1a, 64 bits: the cache file's name for a config path (runtime_shim/runtime_cache.py agrees). */
uint64_t fnv1a64(const char *text);

/* config.json in bundle (NULL: the cwd) read whole: a regular file, no symlink, not too big, no
 * backslash. NUL-terminated and malloc'd, or NULL: Python decides. */
char *read_bundle_config(const char *bundle, size_t *len, struct stat *st);

/* The value of key in envp, or NULL. */
const char *env_value(char **envp, const char *key);
/* value, or NULL when it is NULL or empty. */
const char *nonempty(const char *value);
/* A stat time in nanoseconds, as Python's st_*_ns. */
long long ns_of(struct timespec t);

#endif

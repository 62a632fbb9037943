/* create_fastpath.c: a GPU container's create from the create cache (runtime_shim/create_cache.py
 * writes the cache). */
#ifndef GCT_CREATE_FASTPATH_H
#define GCT_CREATE_FASTPATH_H

#include <stddef.h>
#include <sys/stat.h>

/* Edit the bundle's config.json (data: its text as read_bundle_config read it, st: its stat) from the
 * create cache. 0: done, the runtime may be exec'd (*mode_out: the mode, for the log); -1: Python
 * decides (nothing was changed). rules: the runtime cache's text; cache_dir, config, identity: as
 * checked by the caller. */
int create_from_cache(const char *program, const char *self, const char *bundle, const char *data, size_t total,
                      const struct stat *st, const char *rules, const char *cache_dir, const char *config,
                      const char *identity, char **envp, const char **mode_out);

/* After a failed exec of the runtime: config.json as it was before create_from_cache, if it is still
 * the file written there. */
void create_roll_back(void);

#endif

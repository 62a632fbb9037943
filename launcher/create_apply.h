/* create_apply.c: the create cache's edits applied to config.json with cdi.apply's list semantics
 * (runtime_shim/create_cache.py and cdi/apply.py are the Python twins, docs/c-twins.md). */
#ifndef GCT_CREATE_APPLY_H
#define GCT_CREATE_APPLY_H

#include "json.h"
#include "text_buf.h"

/* cdi.oci_config.MAX_DEPTH: a config.json with more brackets than that, Python walks */
#define CREATE_MAX_BRACKETS 256

/* Whether the prestart hooks already hold the legacy hook (runtime_shim.modes.apply_legacy: then the
 * spec stays as it is). -1: cannot tell. */
int has_nvidia_prestart(const struct json_doc *doc, struct json_span top);

/* The edited document: doc's text with the members the edits (the cache's lines) touch rewritten.
 * 0, or -1: Python decides. */
int apply_cached_edits(const struct json_doc *doc, struct json_span top, const char *cache, struct buf *out);

#endif

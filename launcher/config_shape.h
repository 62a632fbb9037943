/* config_shape.c: whether config.json has the shape cdi.oci_config.SHAPE gives it. */
#ifndef GCT_CONFIG_SHAPE_H
#define GCT_CONFIG_SHAPE_H

#include "json.h"

/* Whether the document's top value has cdi.oci_config.SHAPE (present members only; null is absent),
 * every repeated key refused: "plain", or Python walks it. */
int config_shape_ok(const struct json_doc *doc, struct json_span top);

#endif

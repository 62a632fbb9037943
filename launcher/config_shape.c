/*
 * config.json's shape for the create fast path: cdi.oci_config.SHAPE, as a check that says only "plain"
 * or "not" (not plain: Python walks the document). The document is read with c_common's span reader.
 */
#include <stdlib.h>

#include "config_shape.h"

enum shape_kind { SHAPE_STR, SHAPE_INT, SHAPE_LIST, SHAPE_OBJECT, SHAPE_MAP, SHAPE_ANY_OBJECT };

struct shape;
struct member_shape {
    const char *key;
    const struct shape *shape;
};
struct shape {
    enum shape_kind kind;
    const struct shape *item;              /* lists: every item; maps: every value */
    const struct member_shape *members;    /* objects: NULL-terminated */
};

static const struct shape S_STR = { SHAPE_STR, NULL, NULL }, S_INT = { SHAPE_INT, NULL, NULL };
static const struct shape S_ANY_OBJECT = { SHAPE_ANY_OBJECT, NULL, NULL };
static const struct shape S_STRS = { SHAPE_LIST, &S_STR, NULL }, S_INTS = { SHAPE_LIST, &S_INT, NULL };
static const struct member_shape HOOK_MEMBERS[] = { { "path", &S_STR }, { "args", &S_STRS }, { "env", &S_STRS },
                                                    { "timeout", &S_INT }, { NULL, NULL } };
static const struct shape S_HOOK = { SHAPE_OBJECT, NULL, HOOK_MEMBERS };
static const struct shape S_HOOKS = { SHAPE_LIST, &S_HOOK, NULL };
static const struct member_shape HOOKS_MEMBERS[] = { { "prestart", &S_HOOKS }, { "createRuntime", &S_HOOKS },
                                                     { "createContainer", &S_HOOKS }, { "startContainer", &S_HOOKS },
                                                     { "poststart", &S_HOOKS }, { "poststop", &S_HOOKS },
                                                     { NULL, NULL } };
static const struct member_shape CAPS_MEMBERS[] = { { "bounding", &S_STRS }, { NULL, NULL } };
static const struct shape S_CAPS = { SHAPE_OBJECT, NULL, CAPS_MEMBERS };
static const struct member_shape USER_MEMBERS[] = { { "uid", &S_INT }, { "gid", &S_INT },
                                                    { "additionalGids", &S_INTS }, { NULL, NULL } };
static const struct shape S_USER = { SHAPE_OBJECT, NULL, USER_MEMBERS };
static const struct member_shape PROCESS_MEMBERS[] = { { "env", &S_STRS }, { "capabilities", &S_CAPS },
                                                       { "user", &S_USER }, { NULL, NULL } };
static const struct member_shape MOUNT_MEMBERS[] = { { "destination", &S_STR }, { "source", &S_STR },
                                                     { "type", &S_STR }, { "options", &S_STRS }, { NULL, NULL } };
static const struct shape S_MOUNT = { SHAPE_OBJECT, NULL, MOUNT_MEMBERS };
static const struct member_shape ROOT_MEMBERS[] = { { "path", &S_STR }, { NULL, NULL } };
static const struct member_shape DEVICE_MEMBERS[] = { { "path", &S_STR }, { NULL, NULL } };
static const struct shape S_DEVICE = { SHAPE_OBJECT, NULL, DEVICE_MEMBERS };
static const struct shape S_DEVICES = { SHAPE_LIST, &S_DEVICE, NULL };
static const struct shape S_RULES = { SHAPE_LIST, &S_ANY_OBJECT, NULL };
static const struct member_shape RESOURCES_MEMBERS[] = { { "devices", &S_RULES }, { NULL, NULL } };
static const struct shape S_RESOURCES = { SHAPE_OBJECT, NULL, RESOURCES_MEMBERS };
static const struct member_shape LINUX_MEMBERS[] = { { "devices", &S_DEVICES }, { "resources", &S_RESOURCES },
                                                     { "intelRdt", &S_ANY_OBJECT }, { "netDevices", &S_ANY_OBJECT },
                                                     { NULL, NULL } };
static const struct shape S_PROCESS = { SHAPE_OBJECT, NULL, PROCESS_MEMBERS };
static const struct shape S_MOUNTS = { SHAPE_LIST, &S_MOUNT, NULL };
static const struct shape S_ANNOTATIONS = { SHAPE_MAP, &S_STR, NULL };
static const struct shape S_ROOT = { SHAPE_OBJECT, NULL, ROOT_MEMBERS };
static const struct shape S_HOOKS_TABLE = { SHAPE_OBJECT, NULL, HOOKS_MEMBERS };
static const struct shape S_LINUX = { SHAPE_OBJECT, NULL, LINUX_MEMBERS };
static const struct member_shape TOP_MEMBERS[] = { { "process", &S_PROCESS }, { "mounts", &S_MOUNTS },
                                                   { "annotations", &S_ANNOTATIONS }, { "root", &S_ROOT },
                                                   { "hooks", &S_HOOKS_TABLE }, { "linux", &S_LINUX },
                                                   { NULL, NULL } };
static const struct shape S_TOP = { SHAPE_OBJECT, NULL, TOP_MEMBERS };

/* An integer as json.loads reads one: no fraction, no exponent. */
static int is_int(const struct json_doc *doc, struct json_span v)
{
    char c = json_kind(doc, v);
    if (c != '-' && !(c >= '0' && c <= '9'))
        return 0;
    for (size_t i = v.start; i < v.end; i++)
        if (doc->d[i] == '.' || doc->d[i] == 'e' || doc->d[i] == 'E')
            return 0;
    return 1;
}

/* Whether v has the shape (present members only; null is absent), every repeated key refused. */
static int shape_ok(const struct json_doc *doc, struct json_span v, const struct shape *shape)
{
    char c = json_kind(doc, v);
    switch (shape->kind) {
    case SHAPE_STR:
        return c == '"';
    case SHAPE_INT:
        return is_int(doc, v);
    case SHAPE_ANY_OBJECT:
        return c == '{';
    default:
        break;
    }
    if (c != (shape->kind == SHAPE_LIST ? '[' : '{'))
        return 0;
    struct json_items it;
    if (json_items_of(doc, v, &it) != 0)
        return 0;
    int ok = 1;
    for (size_t i = 0; ok && i < it.n; i++) {
        if (shape->kind != SHAPE_OBJECT) {
            ok = shape_ok(doc, it.val[i], shape->item);
            continue;
        }
        for (const struct member_shape *m = shape->members; m->key; m++)
            if (json_span_is(doc, it.key[i], m->key) && !json_absent(doc, it.val[i]))
                ok = shape_ok(doc, it.val[i], m->shape);
    }
    json_items_free(&it);
    return ok;
}

int config_shape_ok(const struct json_doc *doc, struct json_span top)
{
    return shape_ok(doc, top, &S_TOP);
}

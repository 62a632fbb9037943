"""CDI device requests carried in OCI annotations: `cdi.k8s.io/<key>: vendor/class=name[,...]`.

Kubernetes device plugins and CRI runtimes pass the devices a container was allocated this way; the
key's part after the prefix is free (usually `<plugin>_<id>`), the value a comma list of qualified names.
"""
from __future__ import annotations

from cdi.errors import InvalidNameError, RequestError
from cdi.lazy_pattern import LazyPattern
from cdi.qualified_name import parse_qualified_name

DEFAULT_PREFIX = "cdi.k8s.io/"
MAX_ANNOTATION_NAME = 63  # Kubernetes' limit for the name part of a key
MAX_DEVICES = 1024
_KEY_NAME = LazyPattern(r"^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")


def devices_from_annotations(annotations: dict, prefixes: tuple[str, ...] | list[str] = (DEFAULT_PREFIX,)
                             ) -> tuple[str, ...]:
    """The qualified device names asked for, in key order then value order, without repeats.
    A value under one of our prefixes that is not a list of qualified names is a RequestError."""
    names: list[str] = []
    for key in sorted(k for k in annotations if isinstance(k, str)):
        if not any(key.startswith(p) for p in prefixes):
            continue
        value = annotations[key]
        if not isinstance(value, str):
            raise RequestError("CDI annotation value must be a string", key)
        for item in (v.strip() for v in value.split(",")):
            if not item:
                continue
            try:
                parse_qualified_name(item)
            except InvalidNameError as exc:
                raise RequestError(f"invalid CDI device in annotation: {exc}", key) from None
            if item not in names:
                names.append(item)
                if len(names) > MAX_DEVICES:
                    raise RequestError(f"more than {MAX_DEVICES} CDI devices in annotations", key)
    return tuple(names)


def annotation_key(plugin_name: str, device_id: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The key a device plugin uses for one allocation: `<prefix><plugin>_<id>`, checked."""
    name = f"{plugin_name}_{device_id}"
    if len(name) > MAX_ANNOTATION_NAME or not _KEY_NAME.match(name):
        raise InvalidNameError(f"invalid CDI annotation key name {name!r}: at most {MAX_ANNOTATION_NAME} letters, "
                               "digits, '_', '.', '-', starting and ending with a letter or digit")
    return prefix + name


def annotation_value(devices: list[str]) -> str:
    for device in devices:
        parse_qualified_name(device)
    return ",".join(devices)

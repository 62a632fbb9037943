"""Which cdiVersion a spec's content needs (docs/reference.md#cdi-versions).

Writers emit the OLDEST version the content needs, because consumers accept only the versions they
know (podman 4.3: 0.2.0..0.5.0); readers reject a spec that declares an older version than its
content needs, since a consumer of that version would silently ignore the newer fields.
Works on the raw document (a dict) so the validator can use it before any type conversion, on documents
the schema has refused too: every member is looked at only when it has the type it should have
(Spec.to_dict turns a typed spec into one).
"""
from __future__ import annotations

# Every version of the CDI spec there is; anything else in `cdiVersion` is rejected by the schema.
KNOWN_VERSIONS = ("0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
BASE_VERSION = "0.3.0"


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _edits(document: dict) -> list[dict]:
    """Every containerEdits object of a document: the spec's own and each device's."""
    out = []
    if isinstance(document.get("containerEdits"), dict):
        out.append(document["containerEdits"])
    for device in _devices(document):
        if isinstance(device.get("containerEdits"), dict):
            out.append(device["containerEdits"])
    return out


def _devices(document: dict) -> list[dict]:
    devices = document.get("devices")
    return [d for d in devices if isinstance(d, dict)] if isinstance(devices, list) else []


def _list(edits: dict, key: str) -> list:
    value = edits.get(key)
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _requirements(document: dict) -> list[tuple[str, str]]:
    """(version, why) for every feature the document uses beyond the base version."""
    needs = []
    edits = _edits(document)
    if any("type" in m for e in edits for m in _list(e, "mounts")):
        needs.append(("0.4.0", "a mount 'type'"))
    if any("hostPath" in d for e in edits for d in _list(e, "deviceNodes")):
        needs.append(("0.5.0", "a device node 'hostPath'"))
    devices = _devices(document)
    if any(isinstance(d.get("name"), str) and d["name"][:1].isdigit() for d in devices):
        needs.append(("0.5.0", "a device name starting with a digit"))
    if document.get("annotations") or any(d.get("annotations") for d in devices):
        needs.append(("0.6.0", "annotations"))
    kind = document.get("kind")
    if isinstance(kind, str) and "." in kind.partition("/")[2]:
        needs.append(("0.6.0", "a dot in the device class"))
    if any(e.get("intelRdt") is not None for e in edits):
        needs.append(("0.7.0", "'intelRdt'"))
    if any(e.get("additionalGids") for e in edits):
        needs.append(("0.7.0", "'additionalGids'"))
    if any(e.get("netDevices") for e in edits):
        needs.append(("1.1.0", "'netDevices'"))
    return needs


def minimum_version_of(document: dict) -> tuple[str, str]:
    """(the oldest version that can express the document, the feature that forces it)."""
    best = (BASE_VERSION, "the base spec")
    for version, why in _requirements(document):
        if version_key(version) > version_key(best[0]):
            best = (version, why)
    return best


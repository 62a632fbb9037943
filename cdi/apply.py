"""Applying container edits to an OCI runtime spec (a config.json dict), as CDI consumers do
(docs/reference.md#cdi-apply): env (dedup by key, replace in place), device nodes (filled from the host node; dedup by
container path; a device-cgroup allow rule, default access rwm), mounts (replace the one with the same
destination, then stable-sort by number of path components), hooks (appended), then intelRdt,
additionalGids and netDevices.

`apply_edits` works on a copy and only hands back the result when every edit succeeded, so a failure
leaves the caller's spec untouched: nothing is half-applied.
"""
from __future__ import annotations

import os
import stat

from cdi.errors import SpecError
from cdi.record import deep_copy, replace
from cdi.spec import ContainerEdits, DeviceNode, Hook, Mount

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    from collections.abc import Callable

    StatFn = Callable[[str], os.stat_result]


def _member(parent: dict, key: str, empty: dict | list) -> dict | list:
    """parent[key], made `empty` when absent or null (Go's encoding/json reads null as absent);
    cdi.oci_config has checked that a present one has the right type."""
    value = parent.get(key)
    if value is None:
        value = parent[key] = empty
    return value


def _env_key(entry: str) -> str:
    return entry.partition("=")[0]


def apply_env(env: list[str], additions: list[str]) -> list[str]:
    """Replace an existing variable where it stands (the last of duplicates is the one that counts);
    append new ones."""
    result = list(env)
    index = {_env_key(e): i for i, e in enumerate(result)}
    for entry in additions:
        key = _env_key(entry)
        if key in index:
            result[index[key]] = entry
        else:
            index[key] = len(result)
            result.append(entry)
    return result


def fill_device_node(node: DeviceNode, stat_fn: StatFn = os.stat) -> DeviceNode:
    """A copy of node with type, major, minor and fileMode taken from the host node where missing."""
    filled = replace(node)
    host_path = node.host_path or node.path
    complete = bool(node.type) and node.major is not None and node.minor is not None
    if node.type == "p" or (complete and node.file_mode is not None):
        return filled
    try:
        st = stat_fn(host_path)
    except OSError as exc:
        if complete:  # only the file mode was missing: the runtime's default will do
            return filled
        raise SpecError(f"cannot stat device node: {exc.strerror}", host_path) from None
    if stat.S_ISCHR(st.st_mode):
        host_type = "c"
    elif stat.S_ISBLK(st.st_mode):
        host_type = "b"
    elif stat.S_ISFIFO(st.st_mode):
        host_type = "p"
    elif complete:
        return filled
    else:
        raise SpecError("not a device node", host_path)
    if node.type and node.type != host_type and not (node.type == "u" and host_type == "c"):
        raise SpecError(f"device type {node.type!r} does not match the host node's type {host_type!r}", host_path)
    filled.type = node.type or host_type
    if node.major is None or node.minor is None:
        filled.major, filled.minor = os.major(st.st_rdev), os.minor(st.st_rdev)
    if node.file_mode is None:
        filled.file_mode = stat.S_IMODE(st.st_mode)
    return filled


def _oci_device(node: DeviceNode, process_user: dict) -> dict:
    device = {"path": node.path, "type": node.type}
    if node.type != "p":
        device["major"], device["minor"] = node.major, node.minor
    if node.file_mode is not None:
        device["fileMode"] = node.file_mode
    # a device for a non-root process belongs to that user unless the spec says otherwise
    uid = node.uid if node.uid is not None else (process_user.get("uid") or None)
    gid = node.gid if node.gid is not None else (process_user.get("gid") or None)
    if uid is not None:
        device["uid"] = uid
    if gid is not None:
        device["gid"] = gid
    return device


def apply_device_nodes(oci: dict, nodes: list[DeviceNode], stat_fn: StatFn) -> None:
    linux = _member(oci, "linux", {})
    user = (oci.get("process") or {}).get("user") or {}
    for node in nodes:
        filled = fill_device_node(node, stat_fn)
        device = _oci_device(filled, user)
        devices = [d for d in linux.get("devices") or [] if d.get("path") != node.path]
        linux["devices"] = devices + [device]
        if filled.type in ("b", "c", "u"):
            rule = {"allow": True, "type": "c" if filled.type == "u" else filled.type,
                    "major": filled.major, "minor": filled.minor, "access": filled.permissions or "rwm"}
            resources = _member(linux, "resources", {})
            resources["devices"] = list(resources.get("devices") or []) + [rule]


def _path_depth(path: str) -> int:
    return len([part for part in os.path.normpath(path).split("/") if part])


def apply_mounts(oci: dict, mounts: list[Mount]) -> None:
    current = list(oci.get("mounts") or [])
    for m in mounts:
        current = [c for c in current if c.get("destination") != m.container_path]
        entry = {"destination": m.container_path, "source": m.host_path}
        if m.type:
            entry["type"] = m.type
        if m.options:
            entry["options"] = list(m.options)
        current.append(entry)
    # parents before children, otherwise a later mount hides an earlier one; stable for equal depth
    oci["mounts"] = sorted(current, key=lambda c: _path_depth(c.get("destination", "")))


def apply_hooks(oci: dict, hooks: list[Hook]) -> None:
    if not hooks:
        return
    table = _member(oci, "hooks", {})
    for h in hooks:
        entry = {"path": h.path}
        if h.args:
            entry["args"] = list(h.args)
        if h.env:
            entry["env"] = list(h.env)
        if h.timeout is not None:
            entry["timeout"] = h.timeout
        _member(table, h.hook_name, []).append(entry)


def apply_edits(oci: dict, edits: ContainerEdits, stat_fn: StatFn = os.stat) -> dict:
    """A new OCI spec: oci with edits applied. Raises SpecError (and oci stays as it was) on failure."""
    result = deep_copy(oci)   # cdi.record's: no copy module on a GPU container's create
    if edits.env:
        process = _member(result, "process", {})
        process["env"] = apply_env(process.get("env") or [], edits.env)
    apply_device_nodes(result, edits.device_nodes, stat_fn)
    if edits.mounts:
        apply_mounts(result, edits.mounts)
    apply_hooks(result, edits.hooks)
    if edits.intel_rdt is not None:
        from cdi.spec import _to_json

        _member(result, "linux", {})["intelRdt"] = _to_json(edits.intel_rdt)
    if edits.additional_gids:
        user = _member(_member(result, "process", {}), "user", {"uid": 0, "gid": 0})
        gids = list(user.get("additionalGids") or [])
        user["additionalGids"] = gids + [g for g in dict.fromkeys(edits.additional_gids) if g not in gids]
    if edits.net_devices:
        table = _member(_member(result, "linux", {}), "netDevices", {})
        for nd in edits.net_devices:
            table[nd.host_interface_name] = {"name": nd.name}
    return result

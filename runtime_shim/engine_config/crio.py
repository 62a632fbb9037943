"""CRI-O: a drop-in under crio.conf.d that defines the runtime.

CRI-O merges drop-ins key by key, so unlike containerd the file holds only our keys: one
`[crio.runtime.runtimes.<name>]` table per configured runtime (a copy of the runtime CRI-O already
uses, with `runtime_path` pointing at our shim) and, when asked, `crio.runtime.default_runtime`.
The drop-in is ours alone (a header says so); `--remove` takes our runtime out and deletes the file
when nothing of ours is left. CRI-O always has CDI on, so `--cdi.enabled` changes nothing here.
"""
from __future__ import annotations

import os

import tomlkit

from runtime_shim.engine_config.common import EngineConfigError, FileChange, Plan, RuntimeRequest, read_config_text
from runtime_shim.engine_config.containerd import parse_toml, plain

DEFAULT_CONFIG = "/etc/crio/crio.conf"
DROP_IN_DIR = "crio.conf.d"
DROP_IN_NAME = "99-nvidia.toml"
HEADER = "# Written by `nvidia-ctk runtime configure`; `nvidia-ctk runtime configure --remove` undoes it."


def default_drop_in(config_path: str) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(config_path)), DROP_IN_DIR, DROP_IN_NAME)


def _runtime_table(doc, path: str) -> tuple[dict, dict]:
    """(crio.runtime, crio.runtime.runtimes) of doc, each {} when absent; anything but tables is an error."""
    crio = doc.get("crio", {})
    runtime = crio.get("runtime", {}) if isinstance(crio, dict) else None
    runtimes = runtime.get("runtimes", {}) if isinstance(runtime, dict) else None
    if not isinstance(runtimes, dict):
        raise EngineConfigError("`crio.runtime.runtimes` is not a table", path)
    return runtime, runtimes


def _runtime_entry(main, main_path: str, request: RuntimeRequest):
    runtime, runtimes = _runtime_table(main, main_path)
    for candidate in (request.name, runtime.get("default_runtime"), "crun", "runc"):
        source = runtimes.get(candidate) if candidate else None
        if isinstance(source, dict):
            entry = plain(source)
            break
    else:
        entry = {"runtime_type": "oci"}
    entry["runtime_path"] = request.runtime_path
    return entry


def _load_drop_in(drop_in: str):
    text = read_config_text(drop_in)
    if text is None:
        return None, tomlkit.document()
    if not text.startswith(HEADER):
        raise EngineConfigError("drop-in exists and was not written by nvidia-ctk; move it away or choose "
                                "another --drop-in-config", drop_in)
    return text, parse_toml(text, drop_in)


def _render(default_runtime: str | None, runtimes: dict) -> str | None:
    if not runtimes:
        return None
    doc = tomlkit.document()
    doc.add(tomlkit.comment(HEADER.lstrip("# ")))
    runtime: dict = {"default_runtime": default_runtime} if default_runtime else {}
    runtime["runtimes"] = runtimes
    doc["crio"] = {"runtime": runtime}
    return tomlkit.dumps(doc)


def _existing(drop_doc, drop_in: str) -> tuple[str | None, dict]:
    runtime, runtimes = _runtime_table(drop_doc, drop_in)
    return plain(runtime.get("default_runtime")), {name: plain(entry) for name, entry in runtimes.items()}


def plan_configure(config_path: str, drop_in: str, request: RuntimeRequest) -> Plan:
    if not os.path.isabs(request.runtime_path):
        raise EngineConfigError("the runtime path must be absolute for CRI-O", request.runtime_path)
    main = parse_toml(read_config_text(config_path), config_path)
    drop_text, drop_doc = _load_drop_in(drop_in)
    default_runtime, runtimes = _existing(drop_doc, drop_in)
    runtimes[request.name] = _runtime_entry(main, config_path, request)
    if request.set_as_default:
        default_runtime = request.name
    plan = Plan("crio", restart="crio")
    if request.enable_cdi:
        plan.notes.append("CRI-O always has CDI enabled; --cdi.enabled changes nothing")
    plan.changes.append(FileChange(drop_in, drop_text, _render(default_runtime, runtimes)))
    return plan


def plan_remove(config_path: str, drop_in: str, request: RuntimeRequest) -> Plan:
    drop_text, drop_doc = _load_drop_in(drop_in)
    default_runtime, runtimes = _existing(drop_doc, drop_in)
    plan = Plan("crio", restart="crio")
    if drop_text is None:
        return plan
    if request.name not in runtimes:
        plan.notes.append(f"runtime `{request.name}` is not in {drop_in}; nothing removed from it")
        return plan
    del runtimes[request.name]
    if default_runtime == request.name:
        default_runtime = None
    plan.changes.append(FileChange(drop_in, drop_text, _render(default_runtime, runtimes)))
    return plan

"""Podman: an OCI hooks.d file that runs nvidia-container-runtime-hook at prestart.

Podman (through its hooks.d support) runs the hook for every container; the hook itself does nothing
for a container that asks for no GPU. The hook carries a non-empty `env` (DESIGN: an empty one is
dropped by engines and the image's environment would reach a root-run hook). Podman reads hooks.d for
each new container, so no daemon needs restarting. The file is ours when its hook (path or argv[0])
is an nvidia-container-runtime-hook (NVIDIA's tool writes the same file); anything else is left alone.
"""
from __future__ import annotations

import json
import os

from runtime_shim.engine_config.common import (
    HOOK_EXECUTABLE,
    EngineConfigError,
    FileChange,
    Plan,
    RuntimeRequest,
    parse_json,
    read_config_text,
)

DEFAULT_HOOK_FILE = "/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json"
HOOK_PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def hook_document(hook_path: str) -> dict:
    return {
        "version": "1.0.0",
        "hook": {
            "path": hook_path,
            "args": [HOOK_EXECUTABLE, "prestart"],
            "env": [HOOK_PATH_ENV],
        },
        "when": {"always": True},
        "stages": ["prestart"],
    }


def _load_existing(path: str) -> str | None:
    text = read_config_text(path)
    if text is None:
        return None
    doc = parse_json(text, path)
    hook = doc.get("hook") if isinstance(doc, dict) else None
    if not isinstance(hook, dict):
        hook = {}
    args = hook.get("args") if isinstance(hook.get("args"), list) else []
    # ours (or NVIDIA's): the hook program, or its argv[0] when installed under another name
    names = [hook.get("path"), args[0] if args else None]
    if not any(isinstance(n, str) and os.path.basename(n) == HOOK_EXECUTABLE for n in names):
        raise EngineConfigError(f"hook file exists and is not an {HOOK_EXECUTABLE} hook; left alone", path)
    return text


def plan_configure(hook_file: str, request: RuntimeRequest) -> Plan:
    if not os.path.isabs(request.hook_path):
        raise EngineConfigError("the hook path must be absolute", request.hook_path)
    before = _load_existing(hook_file)
    after = json.dumps(hook_document(request.hook_path), indent=2) + "\n"
    plan = Plan("podman", restart=None)
    if before is not None and json.loads(before) == json.loads(after):
        after = before  # same hook, maybe formatted differently: leave the file alone
    if request.set_as_default:
        plan.notes.append("podman runs the hook for every container; --set-as-default changes nothing")
    if request.enable_cdi:
        plan.notes.append("podman always has CDI enabled; --cdi.enabled changes nothing")
    plan.changes.append(FileChange(hook_file, before, after))
    return plan


def plan_remove(hook_file: str, request: RuntimeRequest) -> Plan:
    before = _load_existing(hook_file)
    return Plan("podman", changes=[FileChange(hook_file, before, None)], restart=None)

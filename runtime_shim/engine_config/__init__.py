"""Point a container engine at the NVIDIA runtime: `nvidia-ctk runtime configure`.

One module per engine turns the engine's current files into a `Plan` (common.py); this module picks
the engine and its default paths. Nothing here runs on a container's start path.
"""
from __future__ import annotations

import importlib

from runtime_shim.engine_config.common import EngineConfigError, Plan, RuntimeRequest, apply_plan

ENGINES = ("docker", "containerd", "crio", "podman")

__all__ = ["ENGINES", "EngineConfigError", "Plan", "RuntimeRequest", "apply_plan", "resolve_paths", "plan_runtime_config"]


def _module(engine: str):
    if engine not in ENGINES:
        raise EngineConfigError(f"unsupported runtime {engine!r}; expected one of {', '.join(ENGINES)}", "--runtime")
    return importlib.import_module(f"runtime_shim.engine_config.{engine}")


def resolve_paths(engine: str, config: str | None, drop_in: str | None) -> tuple[str, str | None]:
    """(config file, drop-in file) with defaults filled in. A drop-in defaults to a directory beside the
    config it belongs to, so `--config /tmp/x/config.toml` never writes under /etc."""
    module = _module(engine)
    if engine == "podman":
        return config or module.DEFAULT_HOOK_FILE, None
    config = config or module.DEFAULT_CONFIG
    if engine == "docker":
        if drop_in:
            raise EngineConfigError("docker has no drop-in configs", "--drop-in-config")
        return config, None
    if drop_in == "":
        # NVIDIA's tool edits the main config in place then; containerd imports make that the riskier way
        raise EngineConfigError(f"{engine} is configured through a drop-in file; give its path", "--drop-in-config")
    return config, drop_in or module.default_drop_in(config)


def plan_runtime_config(engine: str, request: RuntimeRequest, config: str | None = None,
                        drop_in: str | None = None, remove: bool = False) -> Plan:
    module = _module(engine)
    config, drop_in = resolve_paths(engine, config, drop_in)
    action = module.plan_remove if remove else module.plan_configure
    return action(config, request) if drop_in is None else action(config, drop_in, request)

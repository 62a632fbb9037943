"""containerd: the runtime goes into a drop-in file that the main config imports.

containerd 1.x merges an imported file by replacing each plugin's section as a whole
(docs/reference.md#containerd-imports): a drop-in that held only `containerd.runtimes.nvidia` would
silently wipe the user's sandbox image, snapshotter, registry settings and even the default `runc`
runtime. So the drop-in carries the whole CRI section as containerd would otherwise see it (the main
config, then its other imports, in containerd's load order), plus our changes. Re-running `configure`
refreshes that copy; the drop-in is always rebuilt from the current configuration, so a second run
changes nothing.

The main config gets one line, `imports = [...]` (or one more entry in an existing list), marked with
a comment so `--remove` knows the key is ours; the user's comments and formatting stay (tomlkit).
Config version 2 (containerd 1.x, plugin `io.containerd.grpc.v1.cri`) and 3 (containerd 2.x, runtimes
under `io.containerd.cri.v1.runtime`) are supported.
"""
from __future__ import annotations

import copy
import fnmatch
import glob
import os
import re
import subprocess
from dataclasses import dataclass, field

import tomlkit
from tomlkit.exceptions import TOMLKitError

from runtime_shim.engine_config.common import EngineConfigError, FileChange, Plan, RuntimeRequest, read_config_text

DEFAULT_CONFIG = "/etc/containerd/config.toml"
DROP_IN_NAME = "99-nvidia.toml"
CRI_PLUGIN = {2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}
RUNC_RUNTIME_TYPE = "io.containerd.runc.v2"
DROP_IN_HEADER = ("# Written by `nvidia-ctk runtime configure`: the whole CRI section, because containerd imports\n"
                  "# replace a plugin's section. Re-run `nvidia-ctk runtime configure` after editing that section\n"
                  "# in the main config; `nvidia-ctk runtime configure --remove` deletes this file.\n")
CREATED_HEADER = "# Created by `nvidia-ctk runtime configure`."
FILLED_HEADER = "# Filled in by `nvidia-ctk runtime configure` (the file was empty)."
IMPORT_MARKER = "# added by nvidia-ctk runtime configure"


def installed_version() -> tuple[int, int] | None:
    """(major, minor) of the containerd in PATH, None when there is none or it does not say."""
    try:
        out = subprocess.run(["containerd", "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"\sv?(\d+)\.(\d+)\.\d+", out)
    return (int(match.group(1)), int(match.group(2))) if match else None


def default_drop_in(config_path: str) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(config_path)), "conf.d", DROP_IN_NAME)


def parse_toml(text: str | None, path: str) -> tomlkit.TOMLDocument:
    try:
        return tomlkit.parse(text or "")
    except TOMLKitError as exc:
        raise EngineConfigError(f"invalid TOML: {' '.join(str(exc).split())}", path) from None
    except RecursionError:   # tomlkit bounds nesting itself; this keeps any deeper path one line too
        raise EngineConfigError("invalid TOML: nested too deeply", path) from None


def config_version(doc: tomlkit.TOMLDocument, path: str, default: int = 2) -> int:
    version = doc.get("version")
    if version is None:
        if "plugins" in doc:
            raise EngineConfigError("containerd config version 1 is not supported; convert it with "
                                    "`containerd config migrate` or add `version = 2`", path)
        return default
    if isinstance(version, bool) or version not in CRI_PLUGIN:
        raise EngineConfigError(f"unsupported containerd config version {version!r} (expected 2 or 3)", path)
    return int(version)


def plain(value):
    """A detached plain-Python copy of a parsed TOML value (tables split across a file included)."""
    return copy.deepcopy(value.unwrap() if hasattr(value, "unwrap") else value)


def _child(table: dict, key: str, where: str, path: str) -> dict:
    value = table.setdefault(key, {})
    if not isinstance(value, dict):
        raise EngineConfigError(f"`{where}.{key}` is not a table", path)
    return value


def _import_paths(config_path: str, imports, will_exist: str | None = None) -> list[str]:
    """containerd's resolution: relative to the importing file's directory, globs expanded and sorted.
    will_exist: a file not written yet that a pattern should match as if it were there (our drop-in)."""
    base = os.path.dirname(os.path.abspath(config_path))
    paths = []
    for entry in imports or []:
        full = os.path.normpath(entry if os.path.isabs(entry) else os.path.join(base, entry))
        if glob.has_magic(full):
            matches = {os.path.normpath(p) for p in glob.glob(full)}
            if will_exist and _glob_matches(full, will_exist):
                matches.add(will_exist)
            paths.extend(sorted(matches))
        else:
            paths.append(full)
    return paths


def _checked_imports(doc, path: str) -> list:
    imports = doc.get("imports")
    if imports is None:
        return []
    if not isinstance(imports, list) or not all(isinstance(i, str) for i in imports):
        raise EngineConfigError("`imports` must be a list of paths", path)
    return imports


def effective_section(config_path: str, main, plugin: str, drop_in: str, check_order: bool = True):
    """The CRI section containerd would load without our drop-in: the last file in load order defining it.

    Load order is containerd's: the main config, then imports breadth first. A file loaded after our
    drop-in that defines the section would replace ours whole and silently drop the runtime, so that
    is an error naming it.
    """
    plugins = main.get("plugins", {})
    if not isinstance(plugins, dict):
        raise EngineConfigError("`plugins` is not a table", config_path)
    section = plugins.get(plugin)
    ours = os.path.normpath(os.path.abspath(drop_in))
    pending = _import_paths(config_path, _checked_imports(main, config_path), will_exist=ours)
    if ours not in pending:
        pending.append(ours)  # where configure puts it: last in the main config's imports
    seen = {os.path.normpath(os.path.abspath(config_path))}
    after_ours = False
    while pending:
        path, pending = pending[0], pending[1:]
        if path in seen:
            continue
        seen.add(path)
        if path == ours:
            after_ours = True
            continue
        text = read_config_text(path)
        if text is None:
            raise EngineConfigError("imported config file does not exist", path)
        doc = parse_toml(text, path)
        plugins = doc.get("plugins", {})
        if isinstance(plugins, dict) and plugin in plugins:
            if after_ours and check_order:
                raise EngineConfigError(f"imported after the drop-in {drop_in}, its `plugins.\"{plugin}\"` would "
                                        "replace ours; choose a --drop-in-config that loads after it", path)
            section = plugins[plugin]
        pending += _import_paths(path, _checked_imports(doc, path), will_exist=ours)
    if section is not None and not isinstance(section, dict):
        raise EngineConfigError(f"`plugins.\"{plugin}\"` is not a table", config_path)
    return section


@dataclass
class Delta:
    """What our drop-in adds on top of the effective section."""

    runtimes: dict = field(default_factory=dict)
    default_runtime: str | None = None
    enable_cdi: bool | None = None


def _runtimes_of(section) -> dict:
    containerd = section.get("containerd", {}) if section is not None else {}
    runtimes = containerd.get("runtimes", {}) if isinstance(containerd, dict) else {}
    return runtimes if isinstance(runtimes, dict) else {}


def _default_of(section) -> str | None:
    containerd = section.get("containerd", {}) if section is not None else {}
    return containerd.get("default_runtime_name") if isinstance(containerd, dict) else None


def _our_delta(drop_doc, base, plugin: str) -> Delta:
    ours = drop_doc.get("plugins", {}).get(plugin) if drop_doc is not None else None
    if ours is None:
        return Delta()
    base_runtimes = _runtimes_of(base)
    delta = Delta()
    for name, entry in _runtimes_of(ours).items():
        if name in base_runtimes and plain(base_runtimes[name]) == plain(entry):
            continue
        if name == "runc" and "runc" not in base_runtimes and plain(entry) == {"runtime_type": RUNC_RUNTIME_TYPE}:
            continue  # the default runtime we spelled out, not a runtime of ours
        delta.runtimes[name] = plain(entry)
    if _default_of(ours) != _default_of(base):
        delta.default_runtime = _default_of(ours)
    base_cdi = base.get("enable_cdi") if base is not None else None
    if ours.get("enable_cdi") != base_cdi:
        delta.enable_cdi = plain(ours.get("enable_cdi"))
    return delta


def _runtime_entry(base, request: RuntimeRequest) -> dict:
    """A copy of the runtime the engine already uses (its options, cgroup driver...), running our shim."""
    runtimes = _runtimes_of(base)
    for candidate in (request.name, _default_of(base), "runc", "crun"):
        if candidate and isinstance(runtimes.get(candidate), dict):
            entry = plain(runtimes[candidate])
            break
    else:
        entry = {"runtime_type": RUNC_RUNTIME_TYPE}
    if not isinstance(entry.get("options"), dict):
        entry["options"] = {}
    entry["options"]["BinaryName"] = request.runtime_path
    return entry


def build_drop_in(version: int, base, delta: Delta, path: str) -> str | None:
    """The drop-in text (None when nothing of ours is left). Written from plain data, so its layout is
    uniform whatever the main config looks like; the user's comments stay in the main config."""
    if not delta.runtimes:
        return None
    plugin = CRI_PLUGIN[version]
    where = f'plugins."{plugin}"'
    section = plain(base) if base is not None else {}
    containerd = _child(section, "containerd", where, path)
    had_runtimes = "runtimes" in containerd
    runtimes = _child(containerd, "runtimes", f"{where}.containerd", path)
    if not had_runtimes:
        # our table replaces containerd's built-in runtime list, which holds runc
        runtimes["runc"] = {"runtime_type": RUNC_RUNTIME_TYPE}
    runtimes.update(copy.deepcopy(delta.runtimes))
    if delta.default_runtime is not None:
        containerd["default_runtime_name"] = delta.default_runtime
    if delta.enable_cdi is not None:
        section["enable_cdi"] = delta.enable_cdi
    doc = tomlkit.document()
    for line in DROP_IN_HEADER.splitlines():
        doc.add(tomlkit.comment(line.lstrip("# ")))
    doc["version"] = version
    doc["plugins"] = {plugin: section}
    return tomlkit.dumps(doc)


def _glob_matches(pattern: str, path: str) -> bool:
    """Go's filepath.Match, as containerd uses it: a wildcard never crosses a `/`."""
    parts, names = pattern.split("/"), path.split("/")
    return len(parts) == len(names) and all(fnmatch.fnmatchcase(n, p) for p, n in zip(parts, names))


def _same_path(entry: str, config_path: str, drop_in: str) -> bool:
    return _import_paths(config_path, [entry]) == [os.path.normpath(os.path.abspath(drop_in))] \
        and not glob.has_magic(entry)


def _with_import(main_text: str | None, main, config_path: str, drop_in: str, version: int) -> str | None:
    imports = _checked_imports(main, config_path)
    target = os.path.normpath(os.path.abspath(drop_in))
    base_dir = os.path.dirname(os.path.abspath(config_path))
    for entry in imports:
        full = os.path.normpath(os.path.join(base_dir, entry))
        # an existing entry already names the drop-in, or a pattern picks it up (it may not exist yet)
        if full == target or (glob.has_magic(full) and _glob_matches(full, target)):
            return main_text
    if "imports" in main:
        main["imports"].append(target)
        return tomlkit.dumps(main)
    if main_text is None or not main_text.strip():
        # remember whether there was a file, so --remove can delete it or leave it empty again
        main = tomlkit.document()
        main.add(tomlkit.comment((CREATED_HEADER if main_text is None else FILLED_HEADER).lstrip("# ")))
        main["version"] = version
    paths = tomlkit.array()
    paths.append(target)
    main["imports"] = paths
    main["imports"].comment(IMPORT_MARKER.lstrip("# "))
    return tomlkit.dumps(main)


def _without_import(main_text: str | None, config_path: str, drop_in: str) -> str | None:
    if main_text is None:
        return None
    main = parse_toml(main_text, config_path)
    imports = main.get("imports")
    if not isinstance(imports, list):
        return main_text
    ours = [i for i, entry in enumerate(imports) if isinstance(entry, str) and _same_path(entry, config_path, drop_in)]
    if not ours:
        return main_text
    for index in reversed(ours):
        del imports[index]
    if not imports and IMPORT_MARKER in (main["imports"].trivia.comment or ""):
        del main["imports"]
    if set(main.keys()) <= {"version"}:  # nothing but what configure wrote is left
        if main_text.startswith(CREATED_HEADER):
            return None
        if main_text.startswith(FILLED_HEADER):
            return ""
    return tomlkit.dumps(main)


def _load_drop_in(drop_in: str):
    text = read_config_text(drop_in)
    if text is None:
        return None, None
    if not text.startswith(DROP_IN_HEADER.splitlines()[0]):
        raise EngineConfigError("drop-in exists and was not written by nvidia-ctk; move it away or choose "
                                "another --drop-in-config", drop_in)
    return text, parse_toml(text, drop_in)


def plan_configure(config_path: str, drop_in: str, request: RuntimeRequest, default_version: int = 2) -> Plan:
    if not os.path.isabs(request.runtime_path):
        raise EngineConfigError("the runtime path must be absolute for containerd", request.runtime_path)
    main_text = read_config_text(config_path)
    main = parse_toml(main_text, config_path)
    version = config_version(main, config_path, default_version)
    drop_text, drop_doc = _load_drop_in(drop_in)
    if drop_doc is not None and drop_doc.get("version", version) != version:
        raise EngineConfigError(f"drop-in has config version {drop_doc.get('version')}, the main config "
                                f"{version}; remove it first (--remove)", drop_in)
    plugin = CRI_PLUGIN[version]
    base = effective_section(config_path, main, plugin, drop_in)

    delta = _our_delta(drop_doc, base, plugin)
    delta.runtimes[request.name] = _runtime_entry(base, request)
    if request.set_as_default:
        delta.default_runtime = request.name
    if request.enable_cdi:
        delta.enable_cdi = True

    plan = Plan("containerd", restart="containerd")
    disabled = main.get("disabled_plugins", [])
    if isinstance(disabled, list) and ({"cri", plugin} & {str(d) for d in disabled}):
        # docker's packages ship containerd with CRI off: the runtime is written but nothing reads it
        plan.notes.append(f"the CRI plugin is disabled in {config_path} (disabled_plugins); "
                          "containerd ignores the runtime until it is enabled")
    if request.enable_cdi:
        found = installed_version()
        if found is not None and found < (1, 7):
            plan.notes.append(f"containerd {found[0]}.{found[1]} here ignores enable_cdi (CDI needs 1.7 or later)")
    # the drop-in first: the main config must never import a file that is not there yet
    plan.changes.append(FileChange(drop_in, drop_text, build_drop_in(version, base, delta, drop_in)))
    plan.changes.append(FileChange(config_path, main_text, _with_import(main_text, main, config_path, drop_in, version)))
    return plan


def plan_remove(config_path: str, drop_in: str, request: RuntimeRequest) -> Plan:
    main_text = read_config_text(config_path)
    drop_text, drop_doc = _load_drop_in(drop_in)
    plan = Plan("containerd", restart="containerd")
    new_drop = None
    if drop_doc is not None:
        main = parse_toml(main_text, config_path)
        version = config_version(main, config_path, drop_doc.get("version", 2))
        base = effective_section(config_path, main, CRI_PLUGIN[version], drop_in, check_order=False)
        delta = _our_delta(drop_doc, base, CRI_PLUGIN[version])
        if request.name not in delta.runtimes:
            plan.notes.append(f"runtime `{request.name}` is not in {drop_in}; nothing removed from it")
            new_drop = drop_text
        else:
            del delta.runtimes[request.name]
            if delta.default_runtime == request.name:
                delta.default_runtime = None
            new_drop = build_drop_in(version, base, delta, drop_in)
    new_main = _without_import(main_text, config_path, drop_in) if new_drop is None else main_text
    # the import goes first: containerd must never be left importing a deleted file
    plan.changes.append(FileChange(config_path, main_text, new_main))
    plan.changes.append(FileChange(drop_in, drop_text, new_drop))
    return plan

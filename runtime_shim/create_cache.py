"""The create cache: what the C launcher needs to edit a GPU container's config.json without Python.

A GPU container's `create` through Python costs an interpreter start (~15-20 ms here); the same request
again, on the same config, specs, driver and driver nodes, gets the same edits. So after Python has
edited a config.json it records, per request, in
`<cache dir>/create-<fnv1a64(config path)>-<fnv1a64(key)>.cache`:

    gct-create-cache 2
    config <config path>                 identity <its identity>   (as in the runtime cache)
    key <line>                           the request's key, line by line (key_lines)
    mode cdi|jit-cdi|legacy
    nvml-helper <path>                   (jit-cdi) how the launcher reads NVML again: gct-nvml-inventory
    nvml-library <path or soname>        LIBRARY MIG_MINORS TIMEOUT, whose output must be exactly the
    nvml-mig-minors <path>               inventory lines (cdi.nvml.load_inventory's transcript, each
    nvml-timeout <seconds>               with its newline)
    inventory <line>
    check <dev> <ino> <size> <mtime_ns> <ctime_ns> <mode> <rdev> <path>   what the edits came from:
    absent <path>                        spec dirs and files, host device nodes, the hooks, the helper
    lstat <mode> <dev> <ino> <size> <mtime_ns> <ctime_ns> <path>   (jit-cdi) every answer the driver
    lstat-dir <mode> <dev> <ino> <path>                            root gave while it was searched
    lstat-absent <path>                                            (cdi.driver_files_cache)
    env <JSON string>                    the edits, as cdi.apply leaves them on an empty spec:
    device <path>\\t<JSON object>         process.env, linux.devices, linux.resources.devices, mounts,
    rule <JSON object>                   hooks (by name), ready to insert
    mount <destination>\\t<JSON object>
    hook <hook name>\\t<JSON object>
    drop-nvidia-prestart                 (cdi, jit-cdi) modes.drop_legacy_hooks after the edits
    unless-nvidia-prestart               (legacy) no change when the hook is there already
    end <length> <checksum>              the lines above are whole and unchanged (runtime_cache.seal)

The launcher (launcher/create_fastpath.c) builds the key from config.json and edits it only when a
file for that key exists, is ours (the runtime cache's trust rules), is whole and unchanged (its end
line: a file cut short, at a line boundary or not, or with a byte changed would otherwise be applied
as far as it goes: edits missing, or half a JSON text written into config.json), names the same config
identity and every check still holds; anything else starts Python, which writes the entry again.

Why the key decides the request: the shim resolves every request from request_view(oci), which holds
exactly the members key_lines writes (the request's env variables, annotations and device-list mounts,
CAP_SYS_ADMIN), so two config.json with the same key get the same request by construction. The rules
naming those members (which env names, prefixes) are written into the runtime cache (key_rules), so the
C side has no list of its own. The key also holds what else picks the mode and the edits: the program
name, the launcher's path (the legacy hook is looked for beside it), the environment the hook entry
copies and NVML's timeout, and the process user (device nodes are given to it).

jit-cdi reads the driver at every create, and so does its cached path: the edits are a function of the
request, the config, the driver root's answers and NVML's answers, and the launcher has the first three
checked by the key and the stat lines and the last read again by gct-nvml-inventory, a small dynamic
program (the static launcher cannot load a library), compared with the transcript Python's inventory
was made of. A request asking for graphics or display is not kept in jit-cdi mode (its DRM nodes come
from a sysfs listing no answer stands for), nor is any request that logged a warning (it must be seen
each time).
"""
from __future__ import annotations

import os

from cdi import json_codec
from cdi.request import DEVICE_LIST_MOUNT_ROOT, is_privileged
from runtime_shim import runtime_cache
from runtime_shim.modes import _is_nvidia_hook
from runtime_shim.runtime_cache import KEY_ENV_PREFIX, KEY_ENVIRON, key_env_names
from runtime_shim.shim_log import log

MAGIC = "gct-create-cache 2"   # 2: sealed (runtime_cache.seal)
MAX_CACHE_BYTES = 1 << 20        # the launcher's read buffer
MAX_ENTRIES = 256                # create cache files kept per config (prune_oldest)


def _relevant_env(entry: str, names: tuple[str, ...]) -> bool:
    name = entry.partition("=")[0]
    return name.startswith(KEY_ENV_PREFIX) or name in names


def request_view(oci: dict, config) -> dict:
    """The members of config.json cdi.request reads, and nothing else (see the module docstring)."""
    names = key_env_names(config)
    process = oci.get("process") or {}
    env = [e for e in process.get("env") or [] if isinstance(e, str) and _relevant_env(e, names)]
    annotations = {k: v for k, v in (oci.get("annotations") or {}).items()
                   if any(k.startswith(p) for p in config.cdi.annotation_prefixes)}
    mounts = [m for m in oci.get("mounts") or []
              if isinstance(m.get("destination"), str) and m["destination"].startswith(DEVICE_LIST_MOUNT_ROOT)]
    bounding = ["CAP_SYS_ADMIN"] if is_privileged(oci) else []
    return {"process": {"env": env, "capabilities": {"bounding": bounding}}, "annotations": annotations,
            "mounts": [{k: m[k] for k in ("destination", "source") if k in m} for m in mounts]}


def key_lines(view: dict, oci: dict, program: str, launcher_exe: str, environ: dict[str, str]) -> list[str]:
    """The key, as create_fastpath.c's request_key writes it."""
    lines = [f"program {program}", f"exe {launcher_exe}"]
    lines += [f"environ {k}={environ[k]}" for k in KEY_ENVIRON if environ.get(k)]
    lines += [f"env {e}" for e in view["process"]["env"]]
    lines += [f"annotation {k}\t{v}" for k, v in view["annotations"].items()]
    for m in view["mounts"]:
        source = m.get("source")
        lines.append(f"mount {m['destination']}" + (f"\t{source}" if isinstance(source, str) else ""))
    lines.append(f"privileged {1 if view['process']['capabilities']['bounding'] else 0}")
    user = (oci.get("process") or {}).get("user") or {}
    ids = [user.get(k) for k in ("uid", "gid")]
    lines.append("user " + " ".join("-" if v is None else str(v) for v in ids))
    return lines


def check_line(path: str) -> str:
    """What the launcher compares: the stat identity of path, or its absence. OSError otherwise."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return f"absent {path}"
    return (f"check {st.st_dev} {st.st_ino} {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns} {st.st_mode} "
            f"{st.st_rdev} {path}")


class Checks:
    """What an entry's edits came from, as the launcher checks it again before using them: stat lines
    (check_line, by path), lstat answers (jit-cdi: the driver root's, cdi.driver_files_cache) written as
    answer_line, and the lines that have the launcher read NVML again and compare its transcript."""

    def __init__(self, stats: list[tuple[str, str]], answers: list | None = None, nvml: list[str] | None = None):
        self.stats, self.answers, self.nvml = stats, answers or [], nvml or []

    def __add__(self, other: Checks) -> Checks:
        return Checks(self.stats + other.stats, self.answers + other.answers, self.nvml + other.nvml)

    def still_true(self) -> bool:
        """Whether every path still gives what it gave (what the edits came from has not changed)."""
        again = checked(path for path, _ in self.stats)
        if again is None or again.stats != self.stats:
            return False
        if not self.answers:   # cdi and legacy entries: no driver-files module on their create
            return True
        from cdi.driver_files_cache import same_answers

        return same_answers(self.answers)

    def lines(self) -> list[str]:
        return self.nvml + [line for _, line in self.stats] + [answer_line(p, a) for p, a in self.answers]


def checked(paths) -> Checks | None:
    """The stat lines of paths (check_line); None when one cannot be looked at (then no cache)."""
    try:
        return Checks([(path, check_line(path)) for path in paths])
    except OSError:
        return None


def answer_line(path: str, answer: list[int] | None) -> str:
    """An lstat answer (cdi.driver_files_cache) as the launcher checks it: lstat-absent (ENOENT, ENOTDIR
    or ENAMETOOLONG, cdi.driver_root.MISSING_ERRNOS), lstat-dir (mode, dev, ino) or lstat (and size,
    mtime_ns, ctime_ns)."""
    if answer is None:
        return f"lstat-absent {path}"
    return f"{'lstat-dir' if len(answer) == 3 else 'lstat'} {' '.join(map(str, answer))} {path}"


def jit_checks(recording, edits, launcher_exe: str) -> Checks | None:
    """jit-cdi's checks (runtime_shim.jit_cdi.JitRecording), or None when its edits cannot be kept."""
    from cdi.nvml import NVML_INVENTORY_PROGRAM, libexec_dir, nvml_timeout

    helper = os.path.join(libexec_dir(os.path.dirname(launcher_exe)), NVML_INVENTORY_PROGRAM)
    answers = recording.answers()
    if answers is None or not os.access(helper, os.X_OK):
        return None
    stats = checked([helper, *recording.stat_paths(edits)])
    nvml = recording.nvml_lines(helper, nvml_timeout())
    if stats is None or nvml is None:
        return None
    return Checks(stats.stats, answers, nvml)


def _raw(text: str) -> bool:
    """Written in JSON as it is (no escape): the launcher compares such texts byte for byte."""
    return json_codec.dumps_compact(text) == f'"{text}"'


def edit_lines(edited: dict, mode: str) -> list[str] | None:
    """The cache's edit lines from the edits applied to an empty spec (empty_spec); None when the
    launcher could not apply them as cdi.apply (and, in cdi mode, drop_legacy_hooks) does."""
    lines = []
    for entry in (edited.get("process") or {}).get("env") or []:
        if not _raw(entry.partition("=")[0]):
            return None
        lines.append("env " + json_codec.dumps_compact(entry))
    linux = edited.get("linux") or {}
    if set(linux) - {"devices", "resources"} or set(linux.get("resources") or {}) - {"devices"}:
        return None   # intelRdt, netDevices: not done by the launcher
    for device in linux.get("devices") or []:
        if not _raw(device["path"]):
            return None
        lines.append(f"device {device['path']}\t{json_codec.dumps_compact(device)}")
    lines += ["rule " + json_codec.dumps_compact(r) for r in (linux.get("resources") or {}).get("devices") or []]
    for mount in edited.get("mounts") or []:
        if not _raw(mount["destination"]):
            return None
        lines.append(f"mount {mount['destination']}\t{json_codec.dumps_compact(mount)}")
    for name, hooks in (edited.get("hooks") or {}).items():
        for hook in hooks:
            if mode != "legacy" and _is_nvidia_hook(hook):
                return None   # drop_legacy_hooks would judge an added hook too: Python does that
            lines.append(f"hook {name}\t{json_codec.dumps_compact(hook)}")
    if set(edited) - {"process", "linux", "mounts", "hooks"} or set(edited.get("process") or {}) - {"env", "user"}:
        return None   # additionalGids and whatever else: Python only
    if any("\n" in line for line in lines):
        return None
    return lines


def empty_spec(oci: dict) -> dict:
    """A spec with only config.json's process user (device nodes are given to it)."""
    user = (oci.get("process") or {}).get("user") or {}
    kept = {k: user[k] for k in ("uid", "gid") if k in user}
    return {"process": {"user": kept}} if kept else {}


def write_entry(environ: dict[str, str], config_path: str, identity: str | None, key: list[str], mode: str,
                checks: list[str], edits: list[str]) -> None:
    """Write the cache file for key. Best effort: a cache that cannot be written only costs speed."""
    directory = runtime_cache.cache_dir(environ)
    if directory is None or identity is None or runtime_cache.config_identity(config_path) != identity:
        return
    key_text = "".join(line + "\n" for line in key)
    fields = [("config", config_path), ("identity", identity), *(("key", line) for line in key), ("mode", mode)]
    body = [f"{k} {v}" for k, v in fields] + checks + edits
    if any("\n" in line or "\0" in line for line in body):
        return
    text = "\n".join([MAGIC, *body]) + "\n"
    data = runtime_cache.seal(text.encode("utf-8", "surrogateescape"))
    if len(data) >= MAX_CACHE_BYTES:
        return
    prefix = f"create-{runtime_cache.fnv1a64(config_path):016x}-"
    name = f"{prefix}{runtime_cache.fnv1a64(key_text):016x}.cache"
    if runtime_cache.write_cache_file(os.path.join(directory, name), data, ".create-cache"):
        prune_oldest(directory, prefix, keep=name)


def prune_oldest(directory: str, prefix: str, keep: str) -> None:
    """At most MAX_ENTRIES files of one config: the least recently written go first (a host handing out
    many distinct device sets, one file each, would otherwise fill its /run; a pruned request is only
    slower once). Best effort."""
    try:
        names = [n for n in os.listdir(directory) if n.startswith(prefix) and n.endswith(".cache") and n != keep]
    except OSError:
        return
    if len(names) < MAX_ENTRIES:
        return
    aged = []
    for name in names:
        try:
            aged.append((os.lstat(os.path.join(directory, name)).st_mtime_ns, name))
        except OSError:
            continue
    for _, name in sorted(aged)[:len(aged) - MAX_ENTRIES + 1]:
        try:
            os.unlink(os.path.join(directory, name))
        except OSError:
            pass

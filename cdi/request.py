"""Which GPUs, capabilities and extras a container asks for (docs/reference.md#requests), read from its OCI spec.

Shared by the runtime shim, the prestart hook and the CLI. The result, a DeviceRequest, holds the
ids exactly as asked (checked for form, not yet looked up): the shim in CDI mode turns them into
qualified CDI names (`cdi_device_names`), the hook maps them onto an inventory (cdi.selection).

Precedence: CDI annotations > volume mounts (when enabled) > environment. Environment values are
read with the last occurrence of a variable winning (docker `-e` plus `--gpus` give two).
"""
from __future__ import annotations

from cdi.annotations import devices_from_annotations
from cdi.config import Config
from cdi.errors import InvalidNameError, RequestError
from cdi.lazy_pattern import LazyPattern
from cdi.log import get_logger
from cdi.qualified_name import parse_qualified_name, qualify
from cdi.record import Record, field
from cdi.require import Requirement, requirements_from_env

log = get_logger(__name__)  # imports logging only when a message can be shown

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
DRIVER_CAPABILITIES = "NVIDIA_DRIVER_CAPABILITIES"
MIG_CONFIG_DEVICES = "NVIDIA_MIG_CONFIG_DEVICES"
MIG_MONITOR_DEVICES = "NVIDIA_MIG_MONITOR_DEVICES"
IMEX_CHANNELS = "NVIDIA_IMEX_CHANNELS"
DISABLE_REQUIRE = "NVIDIA_DISABLE_REQUIRE"
DEVICE_LIST_MOUNT_ROOT = "/var/run/nvidia-container-devices/"

ALL_CAPABILITIES = frozenset({"compat32", "compute", "display", "graphics", "ngx", "utility", "video"})
DEFAULT_CAPABILITIES = frozenset({"utility", "compute"})
CAPABILITY_IMPLIES = {"video": "compute", "display": "graphics"}
CAP_SYS_ADMIN = "CAP_SYS_ADMIN"
MAX_ID_LENGTH = 256
MAX_IDS = 1024
MAX_IMEX_CHANNEL = 2 ** 20 - 1

# The forms a device id may take; anything else is refused before it reaches a lookup or a path.
# The usual ones (an index, a MIG index, a GPU or MIG UUID) are string tests, so a container's start
# imports no re for them; each is held to the pattern in its docstring (tests/unit/cdi/test_lazy_patterns.py).
# Like the patterns' `$`, none takes a trailing newline: check_device_id refuses control characters first.
class _Index:
    """`^[0-9]{1,9}$`."""

    @staticmethod
    def match(text: str) -> bool:
        return 0 < len(text) <= 9 and not text.strip("0123456789")


class _MigIndex:
    """`^[0-9]{1,9}:[0-9]{1,9}$`."""

    @staticmethod
    def match(text: str) -> bool:
        gpu, colon, mig = text.partition(":")
        return bool(colon) and _Index.match(gpu) and _Index.match(mig)


class _Uuid:
    """`(?ai)^<PREFIX>-[0-9A-Fa-f-]{1,64}$`: the prefix in any ASCII case."""

    def __init__(self, prefix: str):
        self.prefix = prefix

    def match(self, text: str) -> bool:
        head, rest = text[:len(self.prefix)], text[len(self.prefix):]
        return (head.isascii() and head.upper() == self.prefix and 0 < len(rest) <= 64
                and not rest.strip("0123456789abcdefABCDEF-"))


ID_FORMS = (
    ("index", _Index),
    ("mig-index", _MigIndex),
    ("gpu-uuid", _Uuid("GPU-")),
    ("mig-uuid", _Uuid("MIG-")),
    ("pci", LazyPattern(r"^([0-9A-Fa-f]{4,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")),
)
_IMEX_CHANNEL = LazyPattern(r"[0-9]{1,7}")
_TRUE = {"1", "t", "T", "TRUE", "true", "True"}


class DeviceRequest(Record, frozen=True):
    source: str = ""                      # "annotation", "mount", "env"; "" when no GPU is asked for
    where: str = ""                       # the variable, annotation or mount the ids came from
    devices: tuple[str, ...] = ()         # ids in request order: "all", "0", "GPU-..", "nvidia.com/gpu=0", ...
    is_gpu_container: bool = False        # True with no devices = "none": driver files, no GPU nodes
    capabilities: frozenset[str] = frozenset()
    mig_config: tuple[str, ...] = ()      # only ever set for privileged containers
    mig_monitor: tuple[str, ...] = ()
    imex_channels: tuple[int, ...] = ()
    imex_all: bool = False
    requirements: tuple[Requirement, ...] = ()
    disable_require: bool = False
    legacy_image: bool = False
    privileged: bool = False
    refused: str = ""                     # why an env request was ignored (unprivileged, by config)
    env: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def cdi_device_names(self, default_kind: str = "nvidia.com/gpu") -> list[str]:
        """Qualified CDI names for the shim's CDI mode: bare ids become `<default_kind>=<id>`."""
        names = []
        for device_id in self.devices:
            form = classify_id(device_id)
            if form in ("gpu-uuid", "mig-uuid"):  # specs carry NVML's spelling: GPU-<lower-case hex>
                device_id = device_id[:3].upper() + device_id[3:].lower()
            name = device_id if form == "cdi" else qualify(default_kind, device_id)
            if name not in names:
                names.append(name)
        return names


def container_env(oci: dict) -> dict[str, str]:
    """process.env as a dict; the last occurrence of a variable wins, as in the container."""
    env = {}
    for entry in ((oci.get("process") or {}).get("env") or []):
        if isinstance(entry, str):
            key, _, value = entry.partition("=")
            env[key] = value
    return env


def is_privileged(oci: dict) -> bool:
    caps = (oci.get("process") or {}).get("capabilities") or {}
    return CAP_SYS_ADMIN in (caps.get("bounding") or [])


def is_legacy_image(env: dict[str, str]) -> bool:
    return "CUDA_VERSION" in env and "NVIDIA_REQUIRE_CUDA" not in env


def classify_id(device_id: str) -> str:
    """The form of a checked id: one of ID_FORMS' names, "cdi", "all" or "none"."""
    if device_id in ("all", "none"):
        return device_id
    if "=" in device_id:
        return "cdi"
    return next((name for name, pattern in ID_FORMS if pattern.match(device_id)), "unknown")


def check_device_id(device_id: str, where: str) -> str:
    """device_id if it has one of the known forms; a RequestError naming it (safely quoted) if not."""
    if len(device_id) > MAX_ID_LENGTH:
        raise RequestError(f"malformed device id {device_id[:32]!r}...: longer than {MAX_ID_LENGTH}", where)
    # ASCII only: Unicode case folding would let look-alikes (`MıG-`) pass the case-insensitive forms
    if not device_id.isascii() or any(ord(c) < 32 or ord(c) == 127 for c in device_id) or ".." in device_id:
        raise RequestError(f"malformed device id {device_id!r}", where)
    if device_id in ("all", "none", "void") or any(p.match(device_id) for _, p in ID_FORMS):
        return device_id
    if "=" in device_id:
        try:
            parse_qualified_name(device_id)
            return device_id
        except InvalidNameError as exc:
            raise RequestError(f"malformed device id {device_id!r}: {exc}", where) from None
    raise RequestError(f"unknown device id {device_id!r}", where)


def parse_device_ids(value: str, where: str) -> tuple[str, ...]:
    """A comma list of ids, entries trimmed and empty ones dropped, each checked."""
    if len(value) > MAX_ID_LENGTH * MAX_IDS:
        raise RequestError("device list too long", where)
    ids = tuple(check_device_id(v.strip(), where) for v in value.split(",") if v.strip())
    if len(ids) > MAX_IDS:
        raise RequestError(f"more than {MAX_IDS} device ids", where)
    if len(ids) > 1 and ("all" in ids or "none" in ids) and "void" not in ids:
        raise RequestError(f"'all' and 'none' cannot be combined with other ids: {value!r}", where)
    return ids


def parse_capabilities(value: str | None, legacy_image: bool, supported: str) -> frozenset[str]:
    def tokens(text: str, where: str) -> set[str]:
        found = {t.strip() for t in text.split(",") if t.strip()}
        unknown = sorted(found - ALL_CAPABILITIES - {"all"})
        if unknown:
            raise RequestError(f"unknown driver capability {unknown[0]!r}", where)
        return set(ALL_CAPABILITIES) if "all" in found else found

    allowed = tokens(supported, "supported-driver-capabilities")
    if value is None or not value.strip():
        wanted = set(ALL_CAPABILITIES) if legacy_image else set(DEFAULT_CAPABILITIES)
    else:
        wanted = tokens(value, DRIVER_CAPABILITIES)
    wanted |= {CAPABILITY_IMPLIES[c] for c in wanted if c in CAPABILITY_IMPLIES}
    return frozenset(wanted & allowed)


def _privileged_ids(env: dict[str, str], name: str, privileged: bool) -> tuple[str, ...]:
    value = env.get(name, "").strip()
    if value in ("", "void", "none"):
        return ()
    if not privileged:
        raise RequestError(f"{name} is only allowed for privileged containers (CAP_SYS_ADMIN)", name)
    return parse_device_ids(value, name)


def parse_imex_channels(value: str | None) -> tuple[tuple[int, ...], bool]:
    value = (value or "").strip()
    if value in ("", "void", "none"):
        return (), False
    if value == "all":
        return (), True
    channels = []
    for item in (v.strip() for v in value.split(",")):
        if not _IMEX_CHANNEL.fullmatch(item) or int(item) > MAX_IMEX_CHANNEL:
            raise RequestError(f"invalid IMEX channel {item[:32]!r}: expected 0..{MAX_IMEX_CHANNEL}", IMEX_CHANNELS)
        if int(item) not in channels:
            channels.append(int(item))
    return tuple(channels), False


def _mount_ids(oci: dict) -> tuple[tuple[str, ...], str]:
    ids = []
    for mount in oci.get("mounts") or []:
        destination = mount.get("destination") or ""
        if destination.startswith(DEVICE_LIST_MOUNT_ROOT) and mount.get("source") == "/dev/null":
            device_id = destination[len(DEVICE_LIST_MOUNT_ROOT):]
            if "/" in device_id or not device_id:
                raise RequestError(f"malformed device id {device_id!r}", destination)
            ids.append(check_device_id(device_id, destination))
    if len(ids) > 1 and ("all" in ids or "none" in ids) and "void" not in ids:
        raise RequestError("'all' and 'none' cannot be combined with other device mounts", DEVICE_LIST_MOUNT_ROOT)
    return tuple(ids), DEVICE_LIST_MOUNT_ROOT


def swarm_names(config: Config) -> list[str]:
    """The device variables of `swarm-resource` (a comma list), read before NVIDIA_VISIBLE_DEVICES."""
    return [v.strip() for v in config.swarm_resource.split(",") if v.strip()]


def _env_ids(env: dict[str, str], config: Config, legacy: bool) -> tuple[str | None, str]:
    for name in swarm_names(config) + [VISIBLE_DEVICES]:
        if name in env:
            return env[name], name
    return ("all" if legacy else None), VISIBLE_DEVICES


def _extras(env: dict[str, str], config: Config, privileged: bool, legacy: bool) -> dict:
    """Everything besides the devices. Read only for GPU containers: a container that asks for no GPU
    must start whatever else its environment holds (the shim sees every container)."""
    imex_channels, imex_all = parse_imex_channels(env.get(IMEX_CHANNELS))
    return dict(
        capabilities=parse_capabilities(env.get(DRIVER_CAPABILITIES), legacy, config.supported_driver_capabilities),
        requirements=requirements_from_env(env, legacy),
        disable_require=config.disable_require or env.get(DISABLE_REQUIRE, "") in _TRUE,
        mig_config=_privileged_ids(env, MIG_CONFIG_DEVICES, privileged),
        mig_monitor=_privileged_ids(env, MIG_MONITOR_DEVICES, privileged),
        imex_channels=imex_channels, imex_all=imex_all,
    )


def _requested_ids(oci: dict, env: dict[str, str], config: Config, privileged: bool,
                   legacy: bool) -> tuple[str, str, tuple[str, ...], str]:
    """(source, where, ids, refused) by precedence; source "" when no GPU is asked for."""
    annotated = devices_from_annotations(oci.get("annotations") or {}, config.cdi.annotation_prefixes)
    if annotated:
        return "annotation", "annotations", annotated, ""
    if config.accept_volume_mounts:
        ids, where = _mount_ids(oci)
        if ids:
            return ("", "", (), "") if "void" in ids else ("mount", where, ids, "")
    value, where = _env_ids(env, config, legacy)
    ids = parse_device_ids(value, where) if value is not None else ()
    if not ids or "void" in ids:
        return "", "", (), ""
    if not privileged and not config.accept_envvar_unprivileged:
        # Not an error: CUDA images set NVIDIA_VISIBLE_DEVICES=all themselves, and they must still run
        # (without GPUs) where the admin hands GPUs out only through the device plugin's mounts.
        reason = f"{where} ignored: the configuration refuses it for unprivileged containers"
        log.warning("%s", reason)
        return "", "", (), reason
    return "env", where, ids, ""


def resolve_device_request(oci: dict, config: Config) -> DeviceRequest:
    """What the container in `oci` (a config.json dict) asks for. Raises RequestError for a malformed or
    refused request, RequirementError for a malformed NVIDIA_REQUIRE_*."""
    env = container_env(oci)
    privileged = is_privileged(oci)
    legacy = is_legacy_image(env)
    source, where, ids, refused = _requested_ids(oci, env, config, privileged, legacy)
    base = dict(env=env, privileged=privileged, legacy_image=legacy)
    if not source:
        return DeviceRequest(refused=refused, **base)
    devices = () if ids == ("none",) else tuple(dict.fromkeys(ids))
    return DeviceRequest(source=source, where=where, devices=devices, is_gpu_container=True,
                         **base, **_extras(env, config, privileged, legacy))

"""The plugin's settings: NVIDIA's k8s-device-plugin flags, environment variables and config file v1.

Each setting comes from, in order: its command-line flag, its environment variable, the config file
(`--config-file`, `$CONFIG_FILE`), its default; as in NVIDIA's plugin, a flag or variable that is set
wins over the file. The file is NVIDIA's `version: v1` YAML (or JSON); a key it does not know is an
error naming the key (NVIDIA's decoder ignores it silently, which hides a typo such as `migStategy`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from cdi.errors import CdiError
from device_plugin.resources import resource_name_problem

MIG_STRATEGIES = ("none", "single", "mixed")
DEVICE_LIST_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
DEVICE_ID_STRATEGIES = ("uuid", "index")
DEFAULT_CDI_ANNOTATION_PREFIX = "cdi.k8s.io/"
DEFAULT_DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
DEFAULT_MPS_ROOT = "/run/nvidia/mps"
CONFIG_VERSION = "v1"


class ConfigError(CdiError):
    """A setting or config file the plugin cannot use."""


@dataclass(frozen=True)
class Setting:
    """One setting: its flag, environment variable, place in the config file (a path of keys under
    `flags`, None: not in the file) and kind (str, bool or list: comma-separated on the command line)."""
    dest: str
    flag: str
    env: str | None
    file_keys: tuple[str, ...] | None
    kind: type
    default: object
    help: str
    choices: tuple[str, ...] = ()


SETTINGS = (
    Setting("mig_strategy", "--mig-strategy", "MIG_STRATEGY", ("migStrategy",), str, "none",
            "How MIG devices are exposed: none, single or mixed.", MIG_STRATEGIES),
    Setting("fail_on_init_error", "--fail-on-init-error", "FAIL_ON_INIT_ERROR", ("failOnInitError",), bool, True,
            "Exit when the driver or the devices cannot be read at start; false: wait for them."),
    Setting("nvidia_driver_root", "--nvidia-driver-root", "NVIDIA_DRIVER_ROOT", ("nvidiaDriverRoot",), str, "/",
            "Root of the NVIDIA driver installation (e.g. / or /run/nvidia/driver)."),
    Setting("dev_root", "--dev-root", "NVIDIA_DEV_ROOT", ("nvidiaDevRoot",), str, "",
            "Root under which /dev/nvidia* are found (default: the driver root)."),
    Setting("pass_device_specs", "--pass-device-specs", "PASS_DEVICE_SPECS", ("plugin", "passDeviceSpecs"), bool,
            False, "Also return the device nodes (DeviceSpecs) in Allocate."),
    Setting("device_list_strategy", "--device-list-strategy", "DEVICE_LIST_STRATEGY",
            ("plugin", "deviceListStrategy"), list, ["envvar"],
            "How the runtime is told the devices: envvar, volume-mounts, cdi-annotations, cdi-cri; "
            "comma-separated or repeated for several.", DEVICE_LIST_STRATEGIES),
    Setting("device_id_strategy", "--device-id-strategy", "DEVICE_ID_STRATEGY", ("plugin", "deviceIDStrategy"), str,
            "uuid", "How devices are named to the runtime: uuid or index.", DEVICE_ID_STRATEGIES),
    Setting("cdi_annotation_prefix", "--cdi-annotation-prefix", "CDI_ANNOTATION_PREFIX",
            ("plugin", "cdiAnnotationPrefix"), str, DEFAULT_CDI_ANNOTATION_PREFIX,
            "Prefix of the CDI annotation keys (cdi-annotations strategy)."),
    Setting("nvidia_ctk_path", "--nvidia-ctk-path", "NVIDIA_CTK_PATH", ("plugin", "nvidiaCTKPath"), str, "",
            "nvidia-cdi-hook (or nvidia-ctk) the generated CDI spec runs (default: the one installed with "
            "the plugin)."),
    Setting("container_driver_root", "--container-driver-root", "CONTAINER_DRIVER_ROOT",
            ("plugin", "containerDriverRoot"), str, "",
            "Where the node's driver root (--nvidia-driver-root) is mounted in the plugin's own container, "
            "e.g. /driver-root: the driver is read there, and the CDI spec of --cdi-root names the node's "
            "paths. Default: no container, the driver is read at --nvidia-driver-root."),
    Setting("gds_enabled", "--gds-enabled", "GDS_ENABLED", ("gdsEnabled",), bool, False,
            "Start containers with NVIDIA_GDS=enabled."),
    Setting("mofed_enabled", "--mofed-enabled", "MOFED_ENABLED", ("mofedEnabled",), bool, False,
            "Start containers with NVIDIA_MOFED=enabled."),
    Setting("gfd_output_file", "--gfd-output-file", "GFD_OUTPUT_FILE", ("gfd", "outputFile"), str, "",
            "Also write this node's labels as gpu-feature-discovery does, as an NFD feature file (e.g. "
            "/etc/kubernetes/node-feature-discovery/features.d/gfd), at every start and reload; default: no "
            "labels."),
    Setting("gfd_no_timestamp", "--gfd-no-timestamp", "GFD_NO_TIMESTAMP", ("gfd", "noTimestamp"), bool, False,
            "Leave the nvidia.com/gfd.timestamp label out."),
    Setting("gfd_machine_type_file", "--gfd-machine-type-file", "GFD_MACHINE_TYPE_FILE", ("gfd", "machineTypeFile"),
            str, "/sys/class/dmi/id/product_name", "The DMI product name for the nvidia.com/gpu.machine label."),
    Setting("config_file", "--config-file", "CONFIG_FILE", None, str, "",
            "Config file (NVIDIA's version v1) as an alternative to flags and environment variables."),
    Setting("mps_root", "--mps-root", "MPS_ROOT", ("mpsRoot",), str, DEFAULT_MPS_ROOT,
            "Where the MPS control daemons of sharing.mps keep their pipe, log and shm folders (one folder per "
            "shared GPU)."),
    # ours
    Setting("device_plugin_dir", "--device-plugin-dir", "NVIDIA_DEVICE_PLUGIN_DIR", None, str,
            DEFAULT_DEVICE_PLUGIN_DIR, "The kubelet's device-plugin folder (kubelet.sock and the plugin's sockets)."),
    Setting("cdi_root", "--cdi-root", "NVIDIA_DEVICE_PLUGIN_CDI_ROOT", None, str, "",
            "Write (and keep current) the CDI spec of this host as <DIR>/nvidia.yaml, exactly what "
            "`nvidia-ctk cdi generate` writes; default: use the spec the host already has."),
)
BY_DEST = {s.dest: s for s in SETTINGS}

# Keys of NVIDIA's config file v1 that this plugin reads, or accepts and ignores (None: a section whose
# every key is accepted). `gfd` belongs to gpu-feature-discovery; `resources` renaming is ignored by
# NVIDIA's plugin too; `sharing` is read by load_sharing.
FILE_KEYS = {
    "version": None, "flags": None, "resources": None, "sharing": None, "imex": None,
}
FLAG_KEYS = {"migStrategy", "failOnInitError", "nvidiaDriverRoot", "nvidiaDevRoot", "gdsEnabled", "mofedEnabled",
             "useNodeFeatureAPI", "deviceDiscoveryStrategy", "mpsRoot", "restartOnDeviceUnhealthy", "plugin", "gfd"}
PLUGIN_KEYS = {"passDeviceSpecs", "deviceListStrategy", "deviceIDStrategy", "cdiAnnotationPrefix", "nvidiaCTKPath",
               "containerDriverRoot", "nvidiaHookPath", "cdiFeatureFlags"}
GFD_KEYS = {"oneshot", "noTimestamp", "sleepInterval", "outputFile", "machineTypeFile"}
SHARING_KEYS = {"timeSlicing", "mps"}
TIME_SLICING_KEYS = {"renameByDefault", "failRequestsGreaterThanOne", "resources"}
MPS_MAX_REPLICAS = 100      # every share gets at least 1% of the GPU's threads (cdi.mps.MAX_REPLICAS)
REPLICATED_RESOURCE_KEYS = {"name", "rename", "devices", "replicas"}
SHARED_SUFFIX = ".shared"   # renameByDefault: nvidia.com/gpu -> nvidia.com/gpu.shared


@dataclass(frozen=True)
class ReplicatedResource:
    """One resource to time-slice: each of its devices (all, the first count, or those listed by index,
    MIG index `<gpu>:<mig>` or UUID) is offered replicas times, as rename when that is set."""
    name: str                            # e.g. nvidia.com/gpu, nvidia.com/mig-1g.5gb
    replicas: int
    rename: str = ""
    devices: str | int | tuple[str, ...] = "all"

    @property
    def shared_name(self) -> str:
        return self.rename or self.name


@dataclass(frozen=True)
class TimeSlicing:
    """sharing.timeSlicing, or sharing.mps (strategy "mps"), of NVIDIA's config file v1: the same keys."""
    resources: tuple[ReplicatedResource, ...]
    fail_requests_greater_than_one: bool = False
    strategy: str = "time-slicing"


@dataclass
class Config:
    mig_strategy: str = "none"
    fail_on_init_error: bool = True
    nvidia_driver_root: str = "/"
    dev_root: str = ""
    pass_device_specs: bool = False
    device_list_strategy: list[str] = field(default_factory=lambda: ["envvar"])
    device_id_strategy: str = "uuid"
    cdi_annotation_prefix: str = DEFAULT_CDI_ANNOTATION_PREFIX
    nvidia_ctk_path: str = ""
    container_driver_root: str = ""
    gds_enabled: bool = False
    mofed_enabled: bool = False
    gfd_output_file: str = ""
    gfd_no_timestamp: bool = False
    gfd_machine_type_file: str = "/sys/class/dmi/id/product_name"
    config_file: str = ""
    device_plugin_dir: str = DEFAULT_DEVICE_PLUGIN_DIR
    cdi_root: str = ""
    mps_root: str = DEFAULT_MPS_ROOT
    time_slicing: TimeSlicing | None = None   # only from the config file (sharing.timeSlicing)
    mps: TimeSlicing | None = None            # only from the config file (sharing.mps)

    @property
    def sharing(self) -> TimeSlicing | None:
        """The sharing in force: sharing.mps when set (NVIDIA's plugin then ignores timeSlicing), else
        sharing.timeSlicing, else None."""
        return self.mps or self.time_slicing

    @property
    def device_root(self) -> str:
        return self.dev_root or self.nvidia_driver_root

    @property
    def local_driver_root(self) -> str:
        """Where this process reads the driver (NVML, its files): the node's driver root as mounted in the
        plugin's container (--container-driver-root), else the node's own (--nvidia-driver-root)."""
        return self.container_driver_root or self.nvidia_driver_root

    def uses(self, strategy: str) -> bool:
        return strategy in self.device_list_strategy

    def any_cdi(self) -> bool:
        return any(s.startswith("cdi-") for s in self.device_list_strategy)

    def only_cdi(self) -> bool:
        return all(s.startswith("cdi-") for s in self.device_list_strategy)


def parse_bool(value: object, where: str) -> bool:
    """true/false as Go's strconv.ParseBool takes them (1, t, T, TRUE, true, True and the opposites)."""
    if isinstance(value, bool):
        return value
    text = str(value)
    if text in ("1", "t", "T", "TRUE", "true", "True"):
        return True
    if text in ("0", "f", "F", "FALSE", "false", "False"):
        return False
    raise ConfigError(f"invalid boolean {text!r}", where)


def _as_list(value: object, where: str) -> list[str]:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [v.strip() for v in value if v.strip()]
    raise ConfigError("expected a string or a list of strings", where)


def convert(setting: Setting, value: object, where: str) -> object:
    if setting.kind is bool:
        return parse_bool(value, where)
    if setting.kind is list:
        return _as_list(value, where)
    if not isinstance(value, str):
        raise ConfigError(f"expected a string, got {type(value).__name__}", where)
    return value


def _check_keys(section: dict, known, where: str) -> None:
    for key in section:
        if key not in known:
            raise ConfigError(f"unknown key {key!r}", f"{where}{key}" if where else str(key))


def load_file(path: str) -> dict[str, object]:
    """dest -> value of every setting the config file sets. ConfigError for a file that cannot be read,
    is not YAML, is not version v1, holds an unknown key or a value of the wrong type."""
    import yaml

    from cdi import errors
    from cdi.regular_file import read_config_file

    try:   # bounded, non-blocking, a regular file only (a FIFO or a link to /dev/zero is refused)
        read = read_config_file(path)
    except errors.ConfigError as e:
        raise ConfigError(e.what.replace("cannot read config", "cannot read the config file"), path) from None
    if read is None:
        raise ConfigError("cannot read the config file: No such file or directory", path)
    text = read[0]
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"the config file is not valid YAML{at}", path) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("the config file must be a mapping", path)
    _check_keys(data, FILE_KEYS, "")
    version = data.get("version", CONFIG_VERSION)
    if version != CONFIG_VERSION:
        raise ConfigError(f"unsupported config version {version!r} (expected {CONFIG_VERSION!r})", f"{path}: version")
    flags = data.get("flags") or {}
    if not isinstance(flags, dict):
        raise ConfigError("must be a mapping", f"{path}: flags")
    _check_keys(flags, FLAG_KEYS, "flags.")
    for section, keys in (("plugin", PLUGIN_KEYS), ("gfd", GFD_KEYS)):
        value = flags.get(section) or {}
        if not isinstance(value, dict):
            raise ConfigError("must be a mapping", f"{path}: flags.{section}")
        _check_keys(value, keys, f"flags.{section}.")
    values: dict[str, object] = {}
    for setting in SETTINGS:
        if setting.file_keys is None:
            continue
        node: object = flags
        for key in setting.file_keys:
            node = node.get(key) if isinstance(node, dict) else None
        if node is not None:
            values[setting.dest] = convert(setting, node, f"{path}: flags.{'.'.join(setting.file_keys)}")
    time_slicing, mps = load_sharing(data.get("sharing"), path)
    if time_slicing is not None:
        values["time_slicing"] = time_slicing
    if mps is not None:
        values["mps"] = mps
    return values


def _mapping(value: object, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError("must be a mapping", where)
    return value


def _resource_name(value: object, where: str) -> str:
    """A resource name as NVIDIA's config takes it: `gpu` or `nvidia.com/gpu`, `mig-1g.5gb` or
    `nvidia.com/mig-1g.5gb`."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError("expected a resource name such as nvidia.com/gpu", where)
    name = value.strip()
    if "/" not in name:
        name = f"nvidia.com/{name}"
    vendor, _, short = name.partition("/")
    problem = "expected nvidia.com/<name>, e.g. nvidia.com/gpu" if vendor != "nvidia.com" or not short else \
        resource_name_problem(name)
    if problem:
        raise ConfigError(f"invalid resource name {value!r} ({problem})", where)
    return name


def _replicated_devices(value: object, where: str) -> str | int | tuple[str, ...]:
    """`all`, a count (> 0) or a list of GPU indexes, MIG indexes (`0:1`) or UUIDs, as NVIDIA's decoder
    takes them."""
    if value is None or value == "all":
        return "all"
    if isinstance(value, bool):
        raise ConfigError(f"unrecognized devices {value!r} (expected all, a count or a list)", where)
    if isinstance(value, int):
        if value <= 0:
            raise ConfigError(f"devices set as {value} but a count of devices must be > 0", where)
        return value
    if isinstance(value, str):
        raise ConfigError(f"devices set as {value!r} but the only valid string input is 'all'", where)
    if isinstance(value, list) and value:
        refs = []
        for item in value:
            if isinstance(item, int) and not isinstance(item, bool) and item >= 0:
                refs.append(str(item))
            elif isinstance(item, str) and item.strip():
                refs.append(item.strip())
            else:
                raise ConfigError(f"unsupported device {item!r} in the devices list (a GPU index, a MIG index "
                                  "such as 0:1, or a UUID)", where)
        return tuple(refs)
    raise ConfigError(f"unrecognized devices {value!r} (expected all, a count or a list)", where)


def _replicated_resource(item: object, rename_by_default: bool, where: str) -> ReplicatedResource:
    item = _mapping(item, where)
    _check_keys(item, REPLICATED_RESOURCE_KEYS, f"{where.split(': ', 1)[-1]}.")
    if "name" not in item:
        raise ConfigError("no resource name specified", where)
    name = _resource_name(item["name"], f"{where}.name")
    replicas = item.get("replicas")
    if replicas is None:
        raise ConfigError("no replicas specified", where)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas <= 0:
        raise ConfigError(f"number of replicas must be a whole number > 0, got {replicas!r}", f"{where}.replicas")
    rename = _resource_name(item["rename"], f"{where}.rename") if item.get("rename") else ""
    if not rename and rename_by_default:
        rename = name + SHARED_SUFFIX
    return ReplicatedResource(name=name, replicas=replicas, rename=rename,
                              devices=_replicated_devices(item.get("devices"), f"{where}.devices"))


def _replicated_resources(section: dict, section_keys: str, path: str, strategy: str,
                          fail_default: bool) -> TimeSlicing:
    _check_keys(section, TIME_SLICING_KEYS, f"sharing.{section_keys}.")
    where = f"{path}: sharing.{section_keys}"
    rename_by_default = parse_bool(section.get("renameByDefault", False), f"{where}.renameByDefault")
    fail = parse_bool(section.get("failRequestsGreaterThanOne", fail_default), f"{where}.failRequestsGreaterThanOne")
    items = section.get("resources")
    if not isinstance(items, list) or not items:
        raise ConfigError("no resources specified (a list of {name, replicas})", f"{where}.resources")
    resources = tuple(_replicated_resource(item, rename_by_default, f"{where}.resources[{n}]")
                      for n, item in enumerate(items))
    names = [r.name for r in resources]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(f"resource {name!r} is listed more than once", f"{where}.resources")
    return TimeSlicing(resources=resources, fail_requests_greater_than_one=fail, strategy=strategy)


def load_sharing(sharing: object, path: str) -> tuple[TimeSlicing | None, TimeSlicing | None]:
    """The config file's (sharing.timeSlicing, sharing.mps), each None when not set; ConfigError for an
    unknown key or a bad value. Both take NVIDIA's keys; failRequestsGreaterThanOne defaults to false for
    time-slicing and to true for MPS, as in NVIDIA's plugin (which keeps "the historical MPS behavior"
    unless the file sets it)."""
    sharing = _mapping(sharing, f"{path}: sharing")
    _check_keys(sharing, SHARING_KEYS, "sharing.")
    time_slicing = _mapping(sharing.get("timeSlicing"), f"{path}: sharing.timeSlicing")
    mps = _mapping(sharing.get("mps"), f"{path}: sharing.mps")
    time_slicing = _replicated_resources(time_slicing, "timeSlicing", path, "time-slicing", False) \
        if time_slicing else None
    if mps:
        mps = _replicated_resources(mps, "mps", path, "mps", True)
        for n, resource in enumerate(mps.resources):
            if resource.replicas > MPS_MAX_REPLICAS:
                raise ConfigError(f"MPS replicas must be at most {MPS_MAX_REPLICAS} (each share gets 100/replicas "
                                  f"percent of the threads), got {resource.replicas}",
                                  f"{path}: sharing.mps.resources[{n}].replicas")
    return time_slicing, mps or None


def _check_mps(config: Config) -> None:
    """NVIDIA's rules for sharing.mps: not with mig-strategy mixed, any list strategy (the shares' pipe
    folder and /dev/shm reach a container as CDI edits, or in the Allocate response without CDI:
    device_plugin.allocate); ours: the plugin writes the shares' CDI spec, so it needs --cdi-root, and
    the MPS root is an absolute path."""
    if config.mps is None:
        return
    if config.mig_strategy == "mixed":
        raise ConfigError("using --mig-strategy=mixed is not supported with MPS", "sharing.mps")
    if not config.cdi_root:
        raise ConfigError("using MPS needs --cdi-root: the plugin writes a CDI device per share there",
                          "sharing.mps")
    if not os.path.isabs(config.mps_root):
        raise ConfigError("must be an absolute path", "--mps-root")


def check(config: Config, serving: bool = True) -> Config:
    """ConfigError for a value outside a setting's choices; the checked config. serving: the config is
    for the plugin itself, so what sharing.mps needs is checked too (not for the node labels)."""
    for setting in SETTINGS:
        if not setting.choices:
            continue
        value = getattr(config, setting.dest)
        for item in value if isinstance(value, list) else [value]:
            if item not in setting.choices:
                raise ConfigError(f"invalid {setting.flag.lstrip('-')} {item!r} (one of: {', '.join(setting.choices)})",
                                  setting.flag)
    if not config.device_list_strategy:
        raise ConfigError(f"no device list strategy (at least one of: {', '.join(DEVICE_LIST_STRATEGIES)})",
                          "--device-list-strategy")
    for name in ("nvidia_driver_root", "device_plugin_dir", "container_driver_root"):
        if getattr(config, name) and not os.path.isabs(getattr(config, name)):
            raise ConfigError("must be an absolute path", BY_DEST[name].flag)
    if serving:
        _check_mps(config)
    return config


def resolve(given: dict[str, object], environ: dict[str, str] | None = None, serving: bool = True) -> Config:
    """The config from the settings given on the command line (dest -> converted value), the
    environment, the config file and the defaults, checked (check's serving)."""
    environ = os.environ if environ is None else environ
    chosen: dict[str, object] = {}
    for setting in SETTINGS:
        if setting.dest in given:
            chosen[setting.dest] = given[setting.dest]
        elif setting.env and environ.get(setting.env, "") != "":
            chosen[setting.dest] = convert(setting, environ[setting.env], f"${setting.env}")
    config_file = chosen.get("config_file") or ""
    from_file = load_file(config_file) if config_file else {}
    values = {**{s.dest: s.default for s in SETTINGS}, **from_file, **chosen}
    values = {k: list(v) if isinstance(v, list) else v for k, v in values.items()}
    return check(Config(**values), serving)

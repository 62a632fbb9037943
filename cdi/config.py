"""config.toml: where it is, every key users have today and its default (docs/reference.md#config).

Path: `$NVIDIA_CTK_CONFIG_FILE_PATH`, else `${XDG_CONFIG_HOME:-/etc}/nvidia-container-runtime/config.toml`.
A missing file means all defaults; a file that is not TOML or holds a value of the wrong type is a
ConfigError naming the key and the file; an unknown key is logged as a warning and ignored (old and
new toolkits share config files). Read with the stdlib tomllib: this runs on every container start, so
the programs on that path (the prestart hook, nvidia-container-cli) keep the parsed document of an
unchanged file between runs (cdi.config_cache) and import no TOML parser most of the time.
"""
from __future__ import annotations

import os

from cdi.errors import ConfigError, InvalidNameError
from cdi.log import get_logger
from cdi.qualified_name import parse_kind
from cdi.record import MISSING, Record, field, fields, is_record, replace
from cdi.regular_file import config_text, read_config_file

log = get_logger(__name__)  # imports logging only when a message can be shown

CONFIG_ENV = "NVIDIA_CTK_CONFIG_FILE_PATH"
RELATIVE_PATH = "nvidia-container-runtime/config.toml"

MODES = ("auto", "legacy", "cdi", "csv", "jit-cdi")
# Values NVIDIA's config takes that this toolkit reads but refuses to run with (csv: Tegra boards'
# CSV file lists): a config holding one still loads (the runtime then fails each GPU container with
# one line saying so), `nvidia-ctk config --set` refuses to write one, and no message offers one.
UNSUPPORTED_MODES = ("csv",)
LOG_LEVELS = ("trace", "debug", "info", "warn", "warning", "error", "fatal", "panic")
FEATURES = ("allow-additional-gids", "allow-cuda-compat-libs-from-container", "allow-ldconfig-from-container",
            "allow-unknown-oci-spec-fields", "disable-cuda-compat-lib-hook", "disable-imex-channel-creation",
            "enable-cuda-compat-lib", "ignore-imex-channel-requests", "no-additional-gids-for-device-nodes")


def _key(name: str, default: object, choices: tuple[str, ...] | None = None, unsupported: tuple[str, ...] = ()) -> object:
    meta = {"toml": name, "choices": choices, "unsupported": unsupported}
    if isinstance(default, list):
        return field(default_factory=lambda: tuple(default), metadata=meta)
    return field(default=default, metadata=meta)


class CliConfig(Record, frozen=True):  # [nvidia-container-cli]
    root: str = _key("root", "")                      # driver root, "" = /
    path: str = _key("path", "")
    environment: tuple[str, ...] = _key("environment", [])
    debug: str = _key("debug", "")
    ldcache: str = _key("ldcache", "")
    load_kmods: bool = _key("load-kmods", True)
    no_cgroups: bool = _key("no-cgroups", False)
    user: str = _key("user", "")
    ldconfig: str = _key("ldconfig", "@/sbin/ldconfig")  # "@" = a host binary


class CdiModeConfig(Record, frozen=True):  # [nvidia-container-runtime.modes.cdi]
    spec_dirs: tuple[str, ...] = _key("spec-dirs", ["/etc/cdi", "/var/run/cdi"])
    default_kind: str = _key("default-kind", "nvidia.com/gpu")
    annotation_prefixes: tuple[str, ...] = _key("annotation-prefixes", ["cdi.k8s.io/"])


class CsvModeConfig(Record, frozen=True):  # [nvidia-container-runtime.modes.csv]
    mount_spec_path: str = _key("mount-spec-path", "/etc/nvidia-container-runtime/host-files-for-container.d")


class LegacyModeConfig(Record, frozen=True):  # [nvidia-container-runtime.modes.legacy]
    cuda_compat_mode: str = _key("cuda-compat-mode", "ldconfig", ("ldconfig", "mount", "disabled", "hook"))


class ModesConfig(Record, frozen=True):
    cdi: CdiModeConfig = _key("cdi", CdiModeConfig())
    csv: CsvModeConfig = _key("csv", CsvModeConfig())
    legacy: LegacyModeConfig = _key("legacy", LegacyModeConfig())


class RuntimeConfig(Record, frozen=True):  # [nvidia-container-runtime]
    debug: str = _key("debug", "/dev/null")
    log_level: str = _key("log-level", "info", LOG_LEVELS)
    runtimes: tuple[str, ...] = _key("runtimes", ["runc", "crun"])
    mode: str = _key("mode", "auto", MODES, UNSUPPORTED_MODES)
    modes: ModesConfig = _key("modes", ModesConfig())


class RuntimeHookConfig(Record, frozen=True):  # [nvidia-container-runtime-hook]
    path: str = _key("path", "nvidia-container-runtime-hook")
    skip_mode_detection: bool = _key("skip-mode-detection", False)


class CtkConfig(Record, frozen=True):  # [nvidia-ctk]
    path: str = _key("path", "nvidia-ctk")


class Config(Record, frozen=True):
    accept_envvar_unprivileged: bool = _key("accept-nvidia-visible-devices-envvar-when-unprivileged", True)
    accept_volume_mounts: bool = _key("accept-nvidia-visible-devices-as-volume-mounts", False)
    disable_require: bool = _key("disable-require", False)
    supported_driver_capabilities: str = _key("supported-driver-capabilities",
                                              "compat32,compute,display,graphics,ngx,utility,video")
    swarm_resource: str = _key("swarm-resource", "")
    nvidia_container_cli: CliConfig = _key("nvidia-container-cli", CliConfig())
    nvidia_container_runtime: RuntimeConfig = _key("nvidia-container-runtime", RuntimeConfig())
    nvidia_container_runtime_hook: RuntimeHookConfig = _key("nvidia-container-runtime-hook", RuntimeHookConfig())
    nvidia_ctk: CtkConfig = _key("nvidia-ctk", CtkConfig())
    features: frozenset[str] = field(default=frozenset(), metadata={"toml": "features"})  # those set to true
    source: str | None = field(default=None, metadata={"toml": None})  # the file read, None = defaults

    @property
    def cdi(self) -> CdiModeConfig:
        return self.nvidia_container_runtime.modes.cdi

    def feature(self, name: str) -> bool:
        return name in self.features

    def host_ldconfig(self) -> str:
        """The ldconfig to run, on the host: `[nvidia-container-cli] ldconfig` (see ldconfig_host_path)."""
        return ldconfig_host_path(self.nvidia_container_cli.ldconfig,
                                  self.feature("allow-ldconfig-from-container"),
                                  self.source or "nvidia-container-cli.ldconfig")


def ldconfig_host_path(value: str, allowed: bool, where: str) -> str:
    """The host path of an ldconfig setting ("@/sbin/ldconfig": the host's /sbin/ldconfig).

    A path without "@" names the image's own binary. NVIDIA refuses it unless
    features.allow-ldconfig-from-container is true (`allowed`), and then runs it as root. We refuse it
    either way: the one ldconfig runner (libcontainer_c.ldconfig) joins only the container's mount
    namespace, so the image's code would run as uid 0 in the host's pid, network and IPC namespaces,
    without the container's seccomp or LSM profile, free to signal every root process of the host
    (docs/libcontainer_c.md#ldconfig). The host's ldconfig does the same job on the container's files."""
    if value.startswith("@"):
        return value[1:]
    if not allowed:
        raise ConfigError(f"ldconfig {value!r} would run a binary from the container image; use "
                          "'@/sbin/ldconfig' for the host's (a path without '@' is refused unless "
                          "features.allow-ldconfig-from-container is set, and refused here even then)", where)
    raise ConfigError(f"ldconfig {value!r} would run a binary from the container image as root on the host; "
                      "this toolkit refuses that even with features.allow-ldconfig-from-container: use "
                      "'@/sbin/ldconfig' for the host's", where)


def config_path(environ: dict | None = None) -> str:
    environ = os.environ if environ is None else environ
    if environ.get(CONFIG_ENV):
        return environ[CONFIG_ENV]
    return os.path.join(environ.get("XDG_CONFIG_HOME") or "/etc", RELATIVE_PATH)


_TYPE_NAMES = {bool: "a boolean", str: "a string", tuple: "a list of strings"}


def supported_choices(f) -> tuple[str, ...] | None:
    """The values a key's field offers users: its choices but the unsupported ones."""
    choices = f.metadata.get("choices")
    return choices and tuple(c for c in choices if c not in f.metadata.get("unsupported", ()))


def _convert(value: object, default: object, dotted: str, source: str, f) -> object:
    choices = f.metadata.get("choices")
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, str):
        ok = isinstance(value, str)
    else:
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        value = tuple(value) if ok else value
    if not ok:
        raise ConfigError(f"{dotted} must be {_TYPE_NAMES[type(default)]}, not {type(value).__name__}", source)
    if choices and value not in choices:
        raise ConfigError(f"{dotted} must be one of {', '.join(supported_choices(f))}, not {value!r}", source)
    return value


def _build(cls: type, table: dict, prefix: str, source: str) -> object:
    by_key = {f.metadata["toml"]: f for f in fields(cls) if f.metadata.get("toml")}
    kwargs = {}
    for key, value in table.items():
        dotted = f"{prefix}{key}"
        f = by_key.get(key)
        if f is None:
            log.warning("unknown config key %s ignored (%s)", dotted, source)
            continue
        default = f.default if f.default_factory is MISSING else f.default_factory()
        if key == "features" and cls is Config:
            kwargs[f.name] = _features(value, source)
        elif is_record(default):
            if not isinstance(value, dict):
                raise ConfigError(f"{dotted} must be a table, not {type(value).__name__}", source)
            kwargs[f.name] = _build(type(default), value, f"{dotted}.", source)
        else:
            kwargs[f.name] = _convert(value, default, dotted, source, f)
    return cls(**kwargs)


def _features(table: object, source: str) -> frozenset[str]:
    if not isinstance(table, dict):
        raise ConfigError(f"features must be a table, not {type(table).__name__}", source)
    enabled = set()
    for name, value in table.items():
        if name not in FEATURES:   # whatever its value: a newer toolkit's flag must not block any container
            log.warning("unknown feature features.%s ignored (%s)", name, source)
            if value is True:
                enabled.add(name)
            continue
        if not isinstance(value, bool):
            raise ConfigError(f"features.{name} must be a boolean, not {type(value).__name__}", source)
        if value:
            enabled.add(name)
    return frozenset(enabled)


def parse_config(text: str, source: str) -> Config:
    return config_from_document(_parse_toml(text, source), source)


def _parse_toml(text: str, source: str) -> dict:
    from cdi.toml_plain import loads_plain

    document = loads_plain(text)   # a plain file (the packaged one) without tomllib's ~20 ms import
    if document is not None:
        return document
    import tomllib  # only when there is a file to read (and no kept document of it: cdi.config_cache)

    try:
        return tomllib.loads(text)
    except (ValueError, RecursionError) as exc:  # TOMLDecodeError, and what tomllib lets through (huge ints)
        raise ConfigError(f"invalid TOML: {str(exc).splitlines()[0] if str(exc) else 'nested too deeply'}",
                          source) from None


def config_from_document(table: dict, source: str) -> Config:
    """The configuration a parsed TOML document gives, every key checked."""
    config = _build(Config, table, "", source)
    try:
        parse_kind(config.cdi.default_kind)
    except InvalidNameError as exc:
        raise ConfigError(f"nvidia-container-runtime.modes.cdi.default-kind: {exc}", source) from None
    return replace(config, source=source)


def kept_config_dir(path: str | os.PathLike | None = None, environ: dict | None = None) -> str | None:
    """Where load_config(path, environ, use_cache=True) keeps the parsed config (cdi.config_cache), and
    the prestart hook its driver files (cdi.driver_files_cache); None: nothing is kept."""
    from cdi import config_cache

    path = os.fsdecode(path) if path is not None else config_path(environ)
    return config_cache.cache_dir_for(path, config_path({}), environ)


def load_config(path: str | os.PathLike | None = None, environ: dict | None = None,
                use_cache: bool = False) -> Config:
    """The configuration from path (default: the path rules above); defaults when the file is missing.
    use_cache: keep the parsed document between runs where cdi.config_cache allows (the shim and the
    prestart hook)."""
    path = os.fsdecode(path) if path is not None else config_path(environ)
    read = read_config_file(path)
    if read is None:
        return Config()
    data, st = read
    cache_dir = None
    if use_cache:
        from cdi import config_cache

        cache_dir = kept_config_dir(path, environ)
        document = config_cache.read_document(cache_dir, path, st) if cache_dir else None
        if document is not None:
            try:
                return config_from_document(document, path)
            except ConfigError:   # a kept document that fails its checks: the file itself decides
                pass
    text = config_text(data, path)
    document = _parse_toml(text, path)
    config = config_from_document(document, path)   # a config that fails its checks is not kept
    if cache_dir:
        config_cache.write_document(cache_dir, path, st, document)
    return config

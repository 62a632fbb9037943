"""What `nvidia-ctk cdi generate` takes and does, without click: its options (one table, from which
ctk.cdi_generate builds the click command and ctk.fast_path reads a plain command line) and its body.

Why apart: click's import (~20-25 ms, with inspect, typing, uuid, datetime) was about half of a whole
`cdi generate` once jsonschema and PyYAML were gone from it; a command line this table fully explains
runs here without it (ctk.fast_path), anything else goes through click as before.
"""
from __future__ import annotations

import os
import sys

from ctk.errors import CliError, info
from ctk.files import make_parent_dirs

FORMATS = ("yaml", "json")
# NVIDIA's --mode values. auto and nvml are what this toolkit does (NVML's GPUs and MIG devices); for the
# others, why they cannot apply here (the error says it, rather than writing a spec that is not asked for).
MODES = ("auto", "nvml", "csv", "wsl", "management", "gds", "mofed", "gdrcopy", "nvswitch", "imex")
_UNSUPPORTED_MODES = {
    "csv": "the driver files of Tegra (Jetson) boards, listed in CSV files",
    "wsl": "WSL2's GPUs, reached through /dev/dxg and the Windows driver store",
    "management": "every driver node and tool, for management containers without a GPU",
    "gds": "GPUDirect Storage nodes (/dev/nvidia-fs*)",
    "mofed": "Mellanox OFED InfiniBand nodes (/dev/infiniband)",
    "gdrcopy": "the gdrdrv node (/dev/gdrdrv)",
    "nvswitch": "NVSwitch nodes (/dev/nvidia-nvswitch*)",
    "imex": "IMEX channel nodes (/dev/nvidia-caps-imex-channels)",
}


class Option:
    """One option of the command: `--name VALUE` (repeatable when `multiple`), or a flag."""

    def __init__(self, name: str, dest: str, help: str, *, short: str | None = None, flag: bool = False,
                 multiple: bool = False, choices: tuple[str, ...] | None = None, default: str | None = None,
                 show_default: bool = False, aliases: tuple[str, ...] = ()):
        self.name, self.dest, self.help, self.short, self.aliases = name, dest, help, short, aliases
        self.flag, self.multiple, self.choices, self.default = flag, multiple, choices, default
        self.show_default = show_default

    @property
    def unset(self) -> object:
        """The value when the option is not given (click's: False, (), the default or None)."""
        return False if self.flag else () if self.multiple else self.default


OPTIONS = (
    Option("--driver-root", "driver_root", "Driver root (default: $NVIDIA_CTK_DRIVER_ROOT, else config.toml "
                                           "[nvidia-container-cli] root, else /)."),
    Option("--output", "output", "File to write (atomically, mode 0644; missing folders are made, mode 0755; "
                                 "a device, FIFO or socket there is refused); '-' or none: stdout.", short="-o"),
    Option("--format", "fmt", "Output format (default: by the output's extension, else yaml).", choices=FORMATS),
    Option("--device-name-strategy", "strategies", "How devices are named: index (0, 1:0), uuid (GPU-.., MIG-..), "
           "type-index (gpu0, mig1:0). Repeatable; default: index and uuid.", multiple=True,
           choices=("index", "uuid", "type-index")),
    Option("--vendor", "vendor", "CDI vendor of the kind.", default="nvidia.com", show_default=True,
           aliases=("--cdi-vendor",)),
    Option("--class", "cls", "CDI class of the kind.", default="gpu", show_default=True, aliases=("--cdi-class",)),
    Option("--dev-root", "dev_root", "Where the driver's /dev is, when not where the driver root says (a "
           "simulated host's own, else the host's /dev): a driver container's rootfs with its own nodes."),
    Option("--library-search-path", "library_search_paths", "A folder inside the driver root also searched for "
           "driver libraries its ld.so.cache does not list (and for libnvidia-ml.so.1). Repeatable.", multiple=True),
    Option("--mode", "mode", "What to describe: auto and nvml (the GPUs and MIG devices NVML reports) are the "
           "modes of this toolkit; NVIDIA's other modes are refused, saying why.", choices=MODES, default="auto",
           show_default=True, aliases=("--discovery-mode",)),
    Option("--csv.file", "csv_files", "NVIDIA's CSV mode (Tegra) only: refused, as that mode is. Repeatable.",
           multiple=True),
    Option("--csv.ignore-pattern", "csv_ignore_patterns", "NVIDIA's CSV mode (Tegra) only: refused, as that mode "
           "is. Repeatable.", multiple=True),
    Option("--config-search-path", "config_search_paths", "NVIDIA's management mode only: refused, as that mode "
           "is. Repeatable.", multiple=True),
    Option("--ldconfig-path", "ldconfig_path", "The host's ldconfig the spec's update-ldcache runs (an absolute "
           "path, '@' prefix optional) [config.toml nvidia-container-cli.ldconfig]."),
    Option("--no-all-device", "no_all_device", "Do not add the 'all' device.", flag=True),
    Option("--device-id", "device_ids", "Describe only this GPU or MIG device (0, 1:0, GPU-.., MIG-.., PCI bus id). "
                                        "Repeatable.", multiple=True, aliases=("--device-ids", "--device", "--devices")),
    Option("--disable-hook", "disabled_hooks", "Leave this subcommand out of the spec's hook entry (create-symlinks, "
           "enable-cuda-compat, update-ldcache, disable-device-node-modification, update-application-profile); "
           "'all': no hook entry. Repeatable.", multiple=True, aliases=("--disable-hooks",)),
    Option("--enable-hook", "enabled_hooks", "Keep this subcommand in the hook entry even when --disable-hook names "
           "it (not 'all'). Repeatable.", multiple=True, aliases=("--enable-hooks",)),
    Option("--nvidia-cdi-hook-path", "hook_path", "nvidia-cdi-hook the spec runs (default: the one next to "
                                                  "nvidia-ctk, else /usr/bin/nvidia-cdi-hook); a path to nvidia-ctk "
                                                  "runs it as `nvidia-ctk hook`.", aliases=("--nvidia-ctk-path",)),
)
HELP = "Generate a CDI spec for the GPUs and MIG devices of this host (or of a driver root)."


def _format_for(output: str | None, fmt: str | None) -> str:
    """--format, else the output's extension, else YAML (as NVIDIA's tool). A format that contradicts
    the extension is refused: CDI consumers parse by extension."""
    from cdi.spec_file import is_yaml_path

    by_extension = None
    if output and output != "-":
        if output.endswith(".json"):
            by_extension = "json"
        elif is_yaml_path(output):
            by_extension = "yaml"
    if fmt and by_extension and fmt != by_extension:
        raise CliError(f"--format {fmt} does not match the file's extension", output)
    return fmt or by_extension or "yaml"


def _say_written(spec, output: str) -> None:
    """What was written, in one line on stderr, as NVIDIA's tool logs `Generated CDI spec with version
    0.5.0` at info level (a spec on stdout says it itself)."""
    count = len(spec.devices)
    info(f"generated CDI spec with version {spec.written_version()}: {count} "
         f"{spec.kind} device{'s' if count != 1 else ''} in {output}")


def _host_ldconfig(value: str) -> str:
    path = value[1:] if value.startswith("@") else value
    if not os.path.isabs(path):
        raise CliError(f"the ldconfig path must be absolute, not {value!r} (the host's ldconfig runs: "
                       "an image's own is never run)", "--ldconfig-path")
    return path


def _disabled_hooks(disabled: tuple[str, ...], enabled: tuple[str, ...]) -> frozenset[str]:
    """NVIDIA's --disable-hook/--enable-hook: what is disabled and not enabled again. Enabling 'all' is
    refused, as NVIDIA's tool refuses it; enabling a hook this toolkit does not write is refused (it
    would not be in the spec); disabling one is a warning (a typo would otherwise go unnoticed)."""
    from cdi.discover import ALL_HOOKS, HOOK_SUBCOMMANDS
    from cdi.log import get_logger

    known = ", ".join(HOOK_SUBCOMMANDS)
    for name in enabled:
        if name == ALL_HOOKS:
            raise CliError("enabling all hooks is not supported: name each one", "--enable-hook")
        if name not in HOOK_SUBCOMMANDS:
            raise CliError(f"this toolkit writes no hook {name!r} (its hooks: {known})", "--enable-hook")
    for name in disabled:
        if name != ALL_HOOKS and name not in HOOK_SUBCOMMANDS:
            get_logger(__name__).warning("--disable-hook %s: this toolkit writes no such hook (its hooks: %s, or all)",
                                         name, known)
    return frozenset(disabled) - frozenset(enabled)


def _dev_root(value: str | None) -> str | None:
    """--dev-root's folder, refused in one line when it holds no dev/ (a typo would give a spec
    without the GPUs' nodes, failing every container)."""
    if value and not os.path.isdir(os.path.join(value, "dev")):
        raise CliError("the dev root has no dev/ folder: give the folder holding the driver's dev/", value)
    return value


def generate(driver_root, output, fmt, strategies, vendor, cls, no_all_device, device_ids, hook_path,
             mode="auto", ldconfig_path=None, dev_root=None, library_search_paths=(), csv_files=(),
             csv_ignore_patterns=(), disabled_hooks=(), enabled_hooks=(), config_search_paths=(),
             transform=None) -> None:
    """transform(spec, driver root path): a change to the spec before it is written (the device plugin's
    cdi.transform_root when it reads the node's driver through a container's mount)."""
    from cdi.config import load_config
    from cdi.discover import default_hook_path
    from cdi.driver_root import DriverRoot, resolve_driver_root
    from cdi.errors import CdiError
    from cdi.generate import generate_spec
    from cdi.nvml import load_inventory
    from cdi.spec_file import render_spec, write_spec

    if mode in _UNSUPPORTED_MODES:
        raise CliError(f"mode {mode} cannot apply here: it describes {_UNSUPPORTED_MODES[mode]}; this toolkit "
                       "describes the GPUs and MIG devices NVML reports (--mode auto or nvml)", "--mode")
    for given, flag, its_mode in ((csv_files, "--csv.file", "csv"), (csv_ignore_patterns, "--csv.ignore-pattern", "csv"),
                                  (config_search_paths, "--config-search-path", "management")):
        if given:
            raise CliError(f"{flag} is for mode {its_mode}, which describes {_UNSUPPORTED_MODES[its_mode]}; this "
                           "toolkit describes the GPUs and MIG devices NVML reports: leave it out", flag)
    for folder in library_search_paths:
        if not folder.startswith("/"):
            raise CliError(f"a library search path is a folder inside the driver root and must be absolute, "
                           f"not {folder!r}", "--library-search-path")
    disabled = _disabled_hooks(disabled_hooks, enabled_hooks)
    yaml_format = _format_for(output, fmt) == "yaml"
    if hook_path is not None and not os.path.isabs(hook_path):
        raise CliError("the hook path must be absolute", "--nvidia-cdi-hook-path")
    try:
        config = load_config()
        cli = config.nvidia_container_cli
        ldconfig = _host_ldconfig(ldconfig_path) if ldconfig_path else config.host_ldconfig()
        root = resolve_driver_root(driver_root, cli.root)
        if dev_root or library_search_paths:
            root = DriverRoot(root.path, dev_root=_dev_root(dev_root), library_search_paths=library_search_paths)
        inventory = load_inventory(root)
        spec = generate_spec(root, inventory, vendor=vendor, cls=cls, strategies=strategies,
                             all_device=not no_all_device, device_ids=device_ids,
                             hook_path=hook_path or default_hook_path(), ldconfig=ldconfig,
                             ld_cache=cli.ldcache, disabled_hooks=disabled)
        if transform is not None:
            transform(spec, root.path)
        if output and output != "-":
            make_parent_dirs(output)
            write_spec(spec, output, yaml_format=yaml_format)
            _say_written(spec, output)
        else:
            text = render_spec(spec, "stdout", yaml_format)
            if sys.stdout is None:  # Python's stdout when fd 1 was closed at start (`>&-`)
                raise CliError("cannot write the spec: stdout is closed", "stdout")
            sys.stdout.write(text)
    except CdiError as e:
        raise CliError(e.what, e.where) from None
    except OSError as e:  # the temp file's name would only confuse: name the file asked for
        raise CliError(f"cannot write the spec: {e.strerror or e}", output or "stdout") from None

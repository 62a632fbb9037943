"""nvidia-device-plugin: the kubelet device plugin for NVIDIA GPUs and MIG devices (docs/device-plugin.md).

The command line is NVIDIA's k8s-device-plugin's: each setting of device_plugin.config.SETTINGS as a
flag (`--mig-strategy mixed`, `--mig-strategy=mixed`; a boolean as `--pass-device-specs` or
`--fail-on-init-error=false`) or its environment variable, or the config file. Errors are one line,
`nvidia-device-plugin: error: <what> (<where>)`, status 1.
"""
from __future__ import annotations

import argparse
import sys

from device_plugin.config import SETTINGS, ConfigError, Config, convert, resolve

PROG = "nvidia-device-plugin"
DESCRIPTION = "NVIDIA device plugin for Kubernetes: offers the GPUs and MIG devices of this node to the kubelet."


class _ArgumentError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):   # one line of ours, not argparse's usage + message
        raise _ArgumentError(message)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description=DESCRIPTION, allow_abbrev=False,
                                     epilog="Every flag's environment variable is named after it in the help; "
                                            "a flag wins over its variable, both over the config file. "
                                            "`nvidia-device-plugin labels --help`: the node's labels as "
                                            "gpu-feature-discovery writes them.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    for s in SETTINGS:
        env = f" [${s.env}]" if s.env else ""
        default = ",".join(s.default) if isinstance(s.default, list) else s.default
        text = f"{s.help} (default: {str(default).lower() if isinstance(default, bool) else default or 'none'}){env}"
        if s.kind is bool:
            parser.add_argument(s.flag, dest=s.dest, nargs="?", const="true", metavar="true|false", help=text)
        elif s.kind is list:
            parser.add_argument(s.flag, dest=s.dest, action="append", metavar="STRATEGY", help=text)
        else:
            parser.add_argument(s.flag, dest=s.dest, metavar="VALUE", help=text)
    return parser


def parse_args(argv: list[str]) -> tuple[bool, dict[str, object]]:
    """(--version asked, dest -> converted value of each setting given on the command line)."""
    args = _parser().parse_args(argv)
    given: dict[str, object] = {}
    for s in SETTINGS:
        value = getattr(args, s.dest)
        if value is None:
            continue
        if s.kind is list:
            value = [item for v in value for item in v.split(",") if item.strip()]
        given[s.dest] = convert(s, value, s.flag)
    return args.version, given


def configure_logging() -> None:
    import logging
    import os

    # gRPC's C core writes its own INFO lines (a kubelet closing its connection) to stderr unless told
    # otherwise; this must be set before grpc is imported
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

    from cdi import log

    handler = logging.StreamHandler()
    handler.setFormatter(log.one_line_formatter(f"{PROG}: %(levelname)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    logging.getLogger("grpc").setLevel(logging.CRITICAL)   # its own tracebacks; every failure is logged by us


def _inventory(config: Config):
    from cdi.nvml import load_inventory

    return load_inventory(config.local_driver_root)


def _nvml_reads(config: Config, inventory):
    """One child reading, at each start of the plugins, what it needs beyond the inventory: the label facts
    (with --gfd-output-file) and the topology (2 GPUs or more; one GPU has no pairs)."""
    from device_plugin.nvml_child import ChildRead

    reads = {}
    if config.gfd_output_file:
        reads["label-facts"] = (config.gfd_machine_type_file, inventory)
    if len(inventory.gpus) >= 2:
        reads["topology"] = ([g.index for g in inventory.gpus],)
    return ChildRead(reads, config.local_driver_root) if reads else None


def _topology(config: Config, inventory, reads):
    from device_plugin.topology import nvml_topology

    return nvml_topology(reads)


def plugin_sources(given: dict):
    """Where the plugin gets what it serves: the settings `given` resolved, NVML under the driver root."""
    from device_plugin.cdi_spec import refresh_spec
    from device_plugin.health_child import nvml_event_source
    from device_plugin.labels_command import write_node_labels
    from device_plugin.manager import Sources

    return Sources(config=lambda: resolve(given), inventory=_inventory, topology=_topology,
                   refresh_spec=refresh_spec, events=lambda c: nvml_event_source(c.local_driver_root),
                   labels=write_node_labels, nvml_reads=_nvml_reads)


def _fail(text: str) -> int:
    from cdi.errors import message_line

    print(message_line(PROG, "error", text), file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["labels"]:   # gpu-feature-discovery's labels (device_plugin/labels_command.py)
        from device_plugin.labels_command import main as labels_main

        return labels_main(argv[1:])
    try:
        show_version, given = parse_args(argv)
        if show_version:
            from cdi.version import version_line

            print(version_line(PROG))
            return 0
        config = resolve(given)
    except _ArgumentError as e:
        return _fail(f"{e} (see {PROG} --help)")
    except ConfigError as e:
        return _fail(str(e))
    configure_logging()
    from device_plugin.labels_command import remove_node_labels
    from device_plugin.manager import InitError, PluginManager

    sources = plugin_sources(given)
    manager = PluginManager(sources, config)
    manager.install_signal_handlers()
    try:
        return manager.run()
    except InitError as e:
        manager.stop_plugins()
        return _fail(f"{e}; failOnInitError is true (--fail-on-init-error=false waits for the driver instead)")
    finally:
        remove_node_labels(manager.config)


if __name__ == "__main__":
    sys.exit(main())

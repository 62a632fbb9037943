"""`nvidia-device-plugin labels`: the node's labels as gpu-feature-discovery writes them
(device_plugin.labels), once (`--oneshot`) or every `--sleep-interval` until SIGTERM, SIGINT or SIGQUIT,
which remove the file, as GFD does; SIGHUP reads the settings again. The plugin itself writes the same
file at every start and reload with `--gfd-output-file` (write_node_labels).

    nvidia-device-plugin labels [--output FILE|-] [--oneshot] [--mig-strategy S] [--no-timestamp] ...

Settings as the plugin's (flags, then environment variables, then `--config-file`, NVIDIA's config v1
with its `flags.gfd` section); `--output -` writes to stdout.
"""
from __future__ import annotations

import argparse
import re
import signal
import sys
import threading

from device_plugin.config import BY_DEST, Config, ConfigError, convert, resolve
from device_plugin.labels import DEFAULT_OUTPUT_FILE, LabelError, node_labels, now, remove_labels, \
    render, sharing_of, write_labels

PROG = "nvidia-device-plugin labels"
DEFAULT_SLEEP_SECONDS = 60.0
SLEEP_ENV = "GFD_SLEEP_INTERVAL"
ONESHOT_ENV = "GFD_ONESHOT"


def labels_of(config: Config, inventory=None, facts=None) -> dict[str, str]:
    """The node's labels from facts, else from NVML read in a child (_facts_in_child)."""
    facts = facts or _facts_in_child(config, inventory)
    return node_labels(facts, config.mig_strategy, None if config.gfd_no_timestamp else now(),
                       sharing_of(config.sharing))


def write_node_labels(config: Config, inventory=None, reads=None) -> None:
    """The plugin's labels (--gfd-output-file), when asked for: a failure is one error line in the log,
    never the plugin's end (labels only describe the node). reads: the start's NVML child
    (device_plugin.nvml_child.ChildRead) with a `label-facts` reader; without one, a child of its own."""
    if not config.gfd_output_file:
        return
    from cdi.errors import CdiError
    from cdi.log import get_logger

    try:
        write_labels(config.gfd_output_file, labels_of(config, inventory, _facts_in_child(config, inventory, reads)))
    except CdiError as e:
        get_logger("nvidia-device-plugin").error("node labels not written: %s", e)


def _facts_in_child(config: Config, inventory=None, reads=None):
    """The node-label facts, NVML read in a child with a deadline (device_plugin.nvml_child): a driver
    that hangs or crashes there is one NvmlError line, not a hung or ended program."""
    from cdi.nvml import load_inventory
    from device_plugin.nvml_child import read_in_child

    if reads is not None and "label-facts" in reads.order:
        return reads.result("label-facts")
    # the inventory first, by gct-nvml-inventory (its own deadline and its own clear lines)
    inventory = inventory if inventory is not None else load_inventory(config.local_driver_root)
    return read_in_child("label-facts", config.local_driver_root, config.gfd_machine_type_file, inventory)


def parse_duration(text: str, where: str) -> float:
    """Seconds from a number or a Go duration of s/m/h parts ("60s", "1m30s", "2h")."""
    value = text.strip()
    try:
        seconds = float(value)
    except ValueError:
        parts = re.fullmatch(r"((?:\d+(?:\.\d+)?[hms])+)", value)
        if not parts:
            raise ConfigError(f"invalid duration {text!r} (e.g. 60s, 5m)", where) from None
        seconds = sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)([hms])", value))
    if seconds <= 0:
        raise ConfigError(f"invalid duration {text!r}: must be more than 0", where)
    return seconds


class _ArgumentError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _ArgumentError(message)


# flag -> the plugin's setting it gives (device_plugin.config.SETTINGS)
SHARED = {"--mig-strategy": "mig_strategy", "--nvidia-driver-root": "nvidia_driver_root",
          "--fail-on-init-error": "fail_on_init_error", "--config-file": "config_file",
          "--no-timestamp": "gfd_no_timestamp", "--machine-type-file": "gfd_machine_type_file"}


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, allow_abbrev=False,
                     description="Write this node's GPU labels as gpu-feature-discovery does: an NFD feature "
                                 "file of key=value lines (the labels: device-plugin.md, \"Node labels\", in "
                                 "/usr/share/doc/gpu-container-toolkit with the packages).")
    parser.add_argument("-o", "--output", "--output-file", dest="gfd_output_file", metavar="FILE",
                        help=f"the feature file, '-' for stdout (default: {DEFAULT_OUTPUT_FILE}) [$GFD_OUTPUT_FILE]")
    parser.add_argument("--oneshot", nargs="?", const="true", metavar="true|false",
                        help=f"write the labels once and exit (default: false) [${ONESHOT_ENV}]")
    parser.add_argument("--sleep-interval", metavar="DURATION",
                        help=f"time between two labellings (default: 60s) [${SLEEP_ENV}]")
    for flag, dest in SHARED.items():
        s = BY_DEST[dest]
        text = f"{s.help} [${s.env}]"
        if s.kind is bool:
            parser.add_argument(flag, dest=dest, nargs="?", const="true", metavar="true|false", help=text)
        else:
            parser.add_argument(flag, dest=dest, metavar="VALUE", help=text)
    return parser


def _settings(argv: list[str], environ) -> tuple[dict[str, object], bool, float]:
    args = _parser().parse_args(argv)
    given = {}
    for dest in ("gfd_output_file", *SHARED.values()):
        value = getattr(args, dest)
        if value is not None:
            given[dest] = convert(BY_DEST[dest], value, next((f for f, d in SHARED.items() if d == dest), "--output"))
    from device_plugin.config import parse_bool

    oneshot = args.oneshot if args.oneshot is not None else environ.get(ONESHOT_ENV) or "false"
    sleep = args.sleep_interval if args.sleep_interval is not None else environ.get(SLEEP_ENV) or ""
    return (given, parse_bool(oneshot, "--oneshot"),
            parse_duration(sleep, "--sleep-interval") if sleep else DEFAULT_SLEEP_SECONDS)


def _config(given: dict[str, object]) -> Config:
    config = resolve(given, serving=False)   # labels only: what serving MPS needs is the plugin's
    if not config.gfd_output_file:
        config.gfd_output_file = DEFAULT_OUTPUT_FILE
    return config


def _label_once(config: Config) -> None:
    labels = labels_of(config)
    if config.gfd_output_file == "-":
        sys.stdout.write(render(labels))
        sys.stdout.flush()
    else:
        write_labels(config.gfd_output_file, labels)


def main(argv: list[str]) -> int:
    import os

    from cdi.errors import CdiError, message_line

    def fail(text: str) -> int:
        print(message_line(PROG.split()[0], "error", text), file=sys.stderr)
        return 1

    try:
        given, oneshot, sleep = _settings(argv, os.environ)
        config = _config(given)
    except _ArgumentError as e:
        return fail(f"{e} (see {PROG} --help)")
    except CdiError as e:
        return fail(str(e))
    wake, state = threading.Event(), {"stop": False, "reload": False}

    def on_signal(signum, _frame):
        state["reload" if signum == signal.SIGHUP else "stop"] = True
        wake.set()

    if not oneshot:
        signal.signal(signal.SIGHUP, on_signal)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
            signal.signal(sig, on_signal)
    while True:
        try:
            _label_once(config)
        except CdiError as e:
            if oneshot or config.fail_on_init_error:
                return fail(str(e))
            print(message_line(PROG.split()[0], "error", f"{e}; retrying in {sleep:g} s"), file=sys.stderr)
        if oneshot:
            return 0
        wake.wait(sleep)
        wake.clear()
        if state["stop"]:
            break
        if state["reload"]:
            state["reload"] = False
            try:
                config = _config(given)
            except CdiError as e:
                print(message_line(PROG.split()[0], "error", f"settings not reloaded, keeping the running "
                                                             f"ones: {e}"), file=sys.stderr)
    if config.gfd_output_file != "-":
        try:
            remove_labels(config.gfd_output_file)
        except LabelError as e:
            return fail(str(e))
    return 0


def remove_node_labels(config: Config) -> None:
    """The plugin's labels go when it ends (as GFD's do): a node without the plugin offers no GPUs."""
    if not config.gfd_output_file:
        return
    try:
        remove_labels(config.gfd_output_file)
    except LabelError as e:
        from cdi.log import get_logger

        get_logger("nvidia-device-plugin").error("%s", e)

"""nvidia-container-cli: the command line that containerd's `ctr run --gpus`, LXC, enroot and
Apptainer call to put GPUs into a container.

    nvidia-container-cli [--root DIR] [--ldcache PATH] [--user[=UID[:GID]]] [--debug FILE] [--load-kmods]
                         info [--csv] | list [...] | configure [...] ROOTFS

`info` and `list` read the driver (NVML) and its files; `configure` injects into a container through
the same injector the prestart hook uses (hook.cli_configure). The syntax is the real tool's
(hook.cli_args). Started through the static launcher as root (clean environment, `python -I -S`).
The driver root: --root, else $NVIDIA_CTK_DRIVER_ROOT, else config.toml's [nvidia-container-cli] root,
else / (cdi.driver_root.resolve_driver_root, shared by every program of the project).

Every failure is one line on stderr, `nvidia-container-cli: error: <what> (<where>)`, and exit 1
(2 for a command line that cannot be parsed).
"""
from __future__ import annotations

import os
import sys

from cdi.errors import message_line, what_where
from hook.cli_args import PROG, UsageError, parse_args


class CliError(Exception):
    def __init__(self, what: str, where: str | None = None):
        super().__init__(what_where(what, where))


def load_cli_config(args, needed: bool = True):
    """config.toml (cdi.config), read when the command needs it; None otherwise. A broken config
    must not stop `info --root DIR`, so info/list read it only to find the driver root."""
    from cdi.config import load_config
    from cdi.driver_root import DRIVER_ROOT_ENV

    if not needed and (args.root or os.environ.get(DRIVER_ROOT_ENV)):
        return None
    return load_config(use_cache=True)   # `configure` runs at container starts: cdi.config_cache


def driver_root_of(args, config):
    from cdi.driver_root import DriverRootError, resolve_driver_root

    try:
        return resolve_driver_root(args.root, config.nvidia_container_cli.root if config else None)
    except DriverRootError as e:   # the shared resolver names nvidia-ctk's flag; ours is --root
        raise CliError(e.what, (e.where or "").replace("from --driver-root", "from --root")) from None


def setup_debug_log(path: str | None) -> None:
    """--debug FILE (or config `debug`): a debug log appended to FILE; nothing on stderr but errors.
    Without FILE, logging is set up only when a message reaches it (cdi.log.configure_on_first_use:
    every logger on these paths is a cdi.log one), so a quiet `configure` never imports logging (~5-10 ms
    at each container start of ctr, LXC and Apptainer)."""
    from cdi.log import configure_on_first_use, one_line_formatter

    if not path:
        def quiet() -> None:
            import logging

            handler = logging.StreamHandler()
            handler.setFormatter(one_line_formatter(f"{PROG}: %(levelname)s: %(message)s"))
            logging.basicConfig(level=logging.ERROR, handlers=[handler])

        configure_on_first_use(quiet)
        return
    import logging

    try:
        handler = logging.FileHandler(path)
    except OSError as e:
        raise CliError(f"cannot open debug log: {e.strerror or e}", path) from None
    handler.setFormatter(one_line_formatter(f"%(asctime)s {PROG}[{os.getpid()}] %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.DEBUG, handlers=[handler])


def run_info(args) -> None:
    from cdi.nvml import load_inventory
    from hook.cli_info import format_info, format_info_csv

    root = driver_root_of(args, load_cli_config(args, needed=False))
    inventory = load_inventory(root)
    sys.stdout.write(format_info_csv(inventory) if args.csv else format_info(inventory))


def run_list(args) -> None:
    from cdi.nvml import load_inventory
    from hook.cli_info import ListRequest, list_host_paths

    config = load_cli_config(args, needed=not args.ldcache)
    root = driver_root_of(args, config)
    ldcache = args.ldcache or (config.nvidia_container_cli.ldcache if config else "") or None
    inventory = load_inventory(root)
    request = ListRequest(devices=args.device, libraries=args.libraries, binaries=args.binaries,
                          ipcs=args.ipcs, firmwares=args.firmwares, compat32=args.compat32,
                          mig_config=args.mig_config, mig_monitor=args.mig_monitor,
                          imex_channels=args.imex_channel, ldcache=ldcache)
    paths = list_host_paths(root, inventory, request)
    sys.stdout.write("".join(p + "\n" for p in paths))


def run_configure(args) -> None:
    from hook.cli_configure import configure
    from hook.prestart import drop_privileges

    drop_privileges()   # the prestart hook's set: what injection needs, and no_new_privs
    config = load_cli_config(args)
    configure(args, config, driver_root_of(args, config))


COMMANDS = {"info": run_info, "list": run_list, "configure": run_configure}


def main(argv: list[str] | None = None) -> int:
    """The program (argv None: sys.argv) or, for tests, one call with explicit arguments."""
    if argv is not None:
        return run(argv)
    # ctr, LXC and Apptainer run this at every container start: the cyclic GC only costs time here
    # (imports allocate much and free little), and so does tearing the interpreter down at exit
    # (~3-5 ms; hook.prestart does the same). run() has flushed stdout; what is left is flushed here.
    import gc

    gc.disable()
    code = run(sys.argv[1:])
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # the reader is gone: nothing more to say
            code = code or 1
    os._exit(code)


def run(argv: list[str]) -> int:
    try:
        args = parse_args(argv)
    except UsageError as e:
        print(message_line(PROG, "error", str(e)), file=sys.stderr)
        return 2
    try:
        setup_debug_log(args.debug)
        COMMANDS[args.command](args)
        sys.stdout.flush()
    except BrokenPipeError:       # `list | head`: the reader is gone, nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except CliError as e:
        print(message_line(PROG, "error", str(e)), file=sys.stderr)
        return 1
    except UsageError as e:
        print(message_line(PROG, "error", str(e)), file=sys.stderr)
        return 2
    except Exception as e:         # noqa: BLE001 - every error type of cdi/libcontainer_c/hook below
        print(message_line(PROG, "error", _describe(e)), file=sys.stderr)
        return 1
    return 0


def _describe(error: Exception) -> str:
    """One line for any error the packages below raise: theirs carry `what`/`where` or are OSErrors
    with a file name; anything else is a bug, still reported as one line with its type."""
    what, where = getattr(error, "what", None), getattr(error, "where", None)
    if what:
        return what_where(what, where)
    if isinstance(error, OSError):
        text = str(error) if type(error).__str__ is not OSError.__str__ else (error.strerror or str(error))
        filename = error.filename
        if filename is not None and os.fsdecode(filename) not in text:
            return what_where(text, filename)
        return text
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


if __name__ == "__main__":
    sys.exit(main())

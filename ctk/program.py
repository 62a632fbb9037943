"""What every way into nvidia-ctk shares: the program's name and the logging `--debug`/`--quiet` ask for.

The click group (ctk.group) and the click-free `cdi generate` (ctk.fast_path) both set logging up
here, and ctk.main, which starts one or the other, needs neither's internals."""
from __future__ import annotations

PROG = "nvidia-ctk"


def configure_logging(debug: bool, quiet: bool = False) -> None:
    """What `--debug` asks (the group's option): debug messages on stderr; else warnings only. `--quiet`:
    errors only, no news lines (ctk.errors.info) either, whatever --debug says (as NVIDIA's tool)."""
    from cdi import log

    if quiet:
        import logging

        from ctk import errors

        errors.quiet = True
        logging.basicConfig(level=logging.ERROR, handlers=[logging.NullHandler()])
        return

    def configure() -> None:
        import logging

        handler = logging.StreamHandler()
        handler.setFormatter(log.one_line_formatter(f"{PROG}: %(levelname)s: %(message)s"))
        logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING, handlers=[handler])

    if debug:
        configure()
    else:  # logging is imported (~3 ms) only if a warning is to be shown: every message goes through cdi.log
        log.configure_on_first_use(configure)

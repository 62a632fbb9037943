"""nvidia-ctk: the admin CLI (click: ctk.group). `cdi generate` with a command line that ctk.fast_path
reads completely runs without importing click (its import was half of the command's time); every other
command line, and any it does not take as a whole, goes to click."""
from __future__ import annotations

import sys

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


def main(argv: list[str] | None = None) -> int:
    from ctk.fast_path import run_without_click

    code = run_without_click(sys.argv[1:] if argv is None else list(argv))
    if code is not None:
        return code
    from ctk.errors import run_cli
    from ctk.group import cli

    return run_cli(cli, PROG, argv)


if __name__ == "__main__":
    sys.exit(main())

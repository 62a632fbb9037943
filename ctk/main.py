"""nvidia-ctk: the admin CLI (click: ctk.group). `cdi generate` with a command line that ctk.fast_path
reads completely runs without importing click (its import was half of the command's time); every other
command line, and any it does not take as a whole, goes to click."""
from __future__ import annotations

import sys

from ctk.program import PROG


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

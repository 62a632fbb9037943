"""One way for every admin command to fail: `nvidia-ctk: error: <what> (<where>)`, exit 1, no traceback."""
from __future__ import annotations

import sys

import click

from cdi.errors import message_line, what_where


class CliError(click.ClickException):
    """An error a user can act on; `where` names the file, device or option concerned."""

    def __init__(self, what: str, where: str | None = None):
        super().__init__(what_where(what, where))

    def show(self, file=None) -> None:  # click's default prefixes "Error: "
        click.echo(message_line(self.prog, "error", self.format_message()), err=True)

    prog = "nvidia-ctk"


def run_cli(command: click.Command, prog: str, argv: list[str] | None) -> int:
    """Run a click command; usage errors keep click's message, everything else is one line."""
    CliError.prog = prog
    try:
        result = command.main(args=argv, prog_name=prog, standalone_mode=False)
    except click.exceptions.Abort:
        click.echo(message_line(prog, "error", "aborted"), err=True)
        return 1
    except click.UsageError as exc:
        if exc.ctx is not None:
            click.echo(exc.ctx.get_usage(), err=True)
        click.echo(message_line(prog, "error", exc.format_message()), err=True)
        return 2
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except OSError as exc:
        where = exc.filename if exc.filename else "system call"
        click.echo(message_line(prog, "error", what_where(exc.strerror or str(exc), where)), err=True)
        return 1
    except click.exceptions.Exit as exc:
        return exc.exit_code
    # commands may return an exit code (e.g. `cdi validate` exits 1 when a file is invalid)
    return result if isinstance(result, int) else 0

"""One way for every admin command to fail: `nvidia-ctk: error: <what> (<where>)`, exit 1, no traceback.

Click-free at import (click is imported by run_cli only): `cdi generate` runs without click
(ctk.fast_path), raising and reporting the same errors."""
from __future__ import annotations

import sys

from cdi.errors import message_line, what_where


class CliError(Exception):
    """An error a user can act on; `where` names the file, device or option concerned."""

    exit_code = 1
    prog = "nvidia-ctk"

    def __init__(self, what: str, where: str | None = None):
        self.message = what_where(what, where)
        super().__init__(self.message)

    def show(self, file=None) -> None:
        print(message_line(self.prog, "error", self.message), file=file or sys.stderr, flush=True)


def report_failure(prog: str, exc: BaseException) -> int | None:
    """The line and exit code for what a command raised that is not click's own: a CliError, an OSError
    (naming its file), or an interrupt (click's Abort says the same). Other exceptions are not ours
    to word: None."""
    if isinstance(exc, CliError):
        exc.show()
        return exc.exit_code
    if isinstance(exc, OSError):
        where = exc.filename if exc.filename else "system call"
        print(message_line(prog, "error", what_where(exc.strerror or str(exc), where)), file=sys.stderr, flush=True)
        return 1
    if isinstance(exc, (KeyboardInterrupt, EOFError)):
        print(file=sys.stderr)
        print(message_line(prog, "error", "aborted"), file=sys.stderr, flush=True)
        return 1
    return None


def run_cli(command, prog: str, argv: list[str] | None) -> int:
    """Run a click command; usage errors keep click's message, everything else is one line."""
    import click

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
    except (CliError, OSError) as exc:
        return report_failure(prog, exc)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    # commands may return an exit code (e.g. `cdi validate` exits 1 when a file is invalid)
    return result if isinstance(result, int) else 0

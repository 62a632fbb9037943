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


quiet = False   # `nvidia-ctk --quiet`: errors only


def info(message: str, prog: str = "nvidia-ctk") -> None:
    """One line of news on stderr (`nvidia-ctk: wrote ...`): the paths and names in it escaped as every
    message line escapes them. stdout stays the command's output. Nothing under --quiet."""
    from cdi.errors import printable

    if quiet:
        return
    print(f"{prog}: {printable(message)}", file=sys.stderr, flush=True)


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


def usage_error_text(exc) -> str:
    """A click usage error in the one-line form: click's words, lower-cased and without the final stop,
    and where to read about it instead of click's usage line (`No such option '--x'.` ->
    `no such option '--x' (see nvidia-ctk cdi generate --help)`)."""
    import click

    if isinstance(exc, getattr(click.exceptions, "NoArgsIsHelpError", ())) and exc.ctx is not None:
        # a bare group (`nvidia-ctk`, `nvidia-ctk cdi`): click would print the whole help as the message
        what = f"missing command: {', '.join(exc.ctx.command.list_commands(exc.ctx))}"
    else:
        what = exc.format_message().strip().rstrip(".")
        what = what[:1].lower() + what[1:]
    return what_where(what, f"see {exc.ctx.command_path} --help" if exc.ctx is not None else None)


def run_cli(command, prog: str, argv: list[str] | None) -> int:
    """Run a click command; every failure, usage errors too, is one line: `<prog>: error: <what> (<where>)`."""
    import click

    CliError.prog = prog
    try:
        result = command.main(args=argv, prog_name=prog, standalone_mode=False)
    except click.exceptions.Abort:
        click.echo(message_line(prog, "error", "aborted"), err=True)
        return 1
    except click.UsageError as exc:
        click.echo(message_line(prog, "error", usage_error_text(exc)), err=True)
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

"""`nvidia-ctk [--debug] cdi generate --name VALUE ...` without click, for command lines it reads whole.

The options are ctk.cdi_generate_run.OPTIONS, the table ctk.cdi_generate builds the click command from;
this reads only the plainest spelling of them (`--name VALUE`, `--name=VALUE`, flags), each value
checked as click checks it (a choice among the allowed ones). Anything else (a short option, --help,
an unknown or repeated single option, a value starting with '-', a positional argument, shell
completion) returns None and the command line goes to click, which parses it or words the usage
error. tests/unit/ctk/test_fast_path.py holds the two to the same parameters.
"""
from __future__ import annotations

import os

from ctk.cdi_generate_run import OPTIONS

_BY_NAME = {name: option for option in OPTIONS for name in (option.name, *option.aliases)}


def parse_generate(args: list[str]) -> tuple[bool, dict] | None:
    """(--debug given, the parameters click would pass to the command), or None: ask click."""
    debug = args[:1] == ["--debug"]
    rest = args[1:] if debug else args
    if rest[:2] != ["cdi", "generate"] or os.environ.get("_NVIDIA_CTK_COMPLETE"):
        return None
    params = {option.dest: [] if option.multiple else option.unset for option in OPTIONS}
    given = set()
    tokens = iter(rest[2:])
    for token in tokens:
        name, equals, value = token.partition("=")
        option = _BY_NAME.get(name)
        if option is None:
            return None
        if option.flag:
            if equals:
                return None
            value = True
        else:
            if not equals:
                value = next(tokens, None)
            if not value or value.startswith("-") or (option.choices and value not in option.choices):
                return None
        if option.multiple:
            params[option.dest].append(value)
        elif option.dest in given:
            return None
        else:
            given.add(option.dest)
            params[option.dest] = value
    return debug, {dest: tuple(value) if isinstance(value, list) else value for dest, value in params.items()}


def run_without_click(args: list[str]) -> int | None:
    """Run `cdi generate` if parse_generate reads the command line; its exit code, or None."""
    parsed = parse_generate(args)
    if parsed is None:
        return None
    from ctk.cdi_generate_run import generate
    from ctk.errors import CliError, report_failure
    from ctk.program import PROG, configure_logging

    debug, params = parsed
    CliError.prog = PROG
    configure_logging(debug)
    try:
        generate(**params)
    except BaseException as exc:
        code = report_failure(PROG, exc)
        if code is None:
            raise
        return code
    return 0

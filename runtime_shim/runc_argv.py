"""The runc command line, read exactly as runc 1.1.5 reads it (urfave/cli v1 on Go's flag package).

The shim must find out two things from argv: which subcommand runc will run, and - for `create` and
`run` - which bundle it will use. Guessing (e.g. "any argument equal to create") gets both wrong for
argv like `--log create ...` or `create --pid-file --bundle ...`. So this module replays runc's own
rules, checked against the real runc by tests/unit/runtime_shim/argv_cases.json:

Global level (Go `flag`): arguments are read left to right until the first one that is not a flag
(or `--`, which is consumed). `-name` and `--name` are the same; a value comes as `--name=value` or
as the next argument (whatever it is, even `create`); a boolean takes a value only with `=`.
An unknown flag or a bad boolean is an error: runc prints usage and runs nothing.

Command level (`create`, `run`): urfave/cli v1 first moves the command's known flags, with the
argument after each flag that has no `=` (even after a boolean: its quirk), in front of the other
arguments, stopping at a `--` that is not such a value; then Go `flag` parses as above. runc then
wants exactly one argument left, the container id. The bundle is the last `--bundle`/`-b` value, the
current directory when unset or empty; `--bundle` and `-b` together are an error.

When runc would refuse the argv, the shim changes nothing and lets runc print its own error; the C
launcher (launcher/runtime_passthrough.c) applies the same global-level rules to decide, without
starting Python, that a command is not `create` or `run`.
"""
from __future__ import annotations

import os

from cdi.lazy_pattern import LazyPattern

# name -> takes a value (False: boolean). Aliases share one entry through _ALIASES.
GLOBAL_FLAGS = {"debug": False, "log": True, "log-format": True, "root": True, "criu": True,
                "systemd-cgroup": False, "rootless": True, "help": False, "h": False,
                "version": False, "v": False}
CREATE_FLAGS = {"bundle": True, "b": True, "console-socket": True, "pid-file": True, "no-pivot": False,
                "no-new-keyring": False, "preserve-fds": True, "help": False, "h": False}
RUN_FLAGS = {**CREATE_FLAGS, "detach": False, "d": False, "keep": False, "no-subreaper": False}
COMMAND_FLAGS = {"create": CREATE_FLAGS, "run": RUN_FLAGS}
MODIFIED_COMMANDS = ("create", "run")
INT_FLAGS = ("preserve-fds",)
# urfave/cli refuses two spellings of one flag in the same command line
_ALIASES = (("bundle", "b"), ("help", "h"), ("version", "v"), ("detach", "d"))

_GO_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_GO_FALSE = ("0", "f", "F", "FALSE", "false", "False")
# strconv.ParseInt(s, 0, 64): sign, then 0x/0o/0b prefixes, a leading 0 for octal, or decimal
_GO_INT = LazyPattern(r"[+-]?(0[xX](_?[0-9a-fA-F])+|0[bB](_?[01])+|0[oO]?(_?[0-7])*|[1-9](_?[0-9])*)")


class ArgvError(ValueError):
    """runc would refuse this command line (it prints usage and runs nothing)."""


class RuncCommand:
    """What runc does with a command line (a plain class: dataclasses cost milliseconds to import)."""

    __slots__ = ("command", "global_flags", "modify", "bundle", "container_id", "error", "prints_version")

    def __init__(self, command: str | None, global_flags: dict[str, str], modify: bool = False,
                 bundle: str | None = None, container_id: str | None = None, error: str = "",
                 prints_version: bool = False):
        self.command = command            # the subcommand runc runs; None: none (help, version, usage error)
        self.prints_version = prints_version  # runc prints its version (and runs nothing)
        self.global_flags = global_flags  # as given (booleans as "true"/"false"), last occurrence wins
        self.modify = modify              # a valid create/run: the shim edits its bundle
        self.bundle = bundle              # as given; None or "" means the current directory
        self.container_id = container_id
        self.error = error                # why runc would refuse it (then modify is False)

    def __repr__(self) -> str:
        return (f"RuncCommand(command={self.command!r}, modify={self.modify}, bundle={self.bundle!r}, "
                f"error={self.error!r})")

    def bundle_dir(self, cwd: str | None = None) -> str:
        """The bundle directory runc will chdir into, made absolute against cwd."""
        base = cwd if cwd is not None else os.getcwd()
        return os.path.normpath(os.path.join(base, self.bundle or "."))

    @property
    def log_file(self) -> str | None:
        return self.global_flags.get("log") or None

    @property
    def log_format(self) -> str:
        return self.global_flags.get("log-format") or "text"


def _go_bool(name: str, value: str) -> str:
    if value in _GO_TRUE:
        return "true"
    if value in _GO_FALSE:
        return "false"
    raise ArgvError(f"invalid boolean value {value!r} for -{name}")


def parse_flags(args: list[str], table: dict[str, bool]) -> tuple[dict[str, str], list[str]]:
    """Go's flag.FlagSet.Parse: (flags set, last wins; the arguments left after them)."""
    found: dict[str, str] = {}
    seen: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if len(arg) < 2 or arg[0] != "-":
            break
        if arg == "--":
            i += 1
            break
        name = arg[2:] if arg[1] == "-" else arg[1:]
        if not name or name[0] in "-=":
            raise ArgvError(f"bad flag syntax: {arg}")
        name, has_value, value = name.partition("=")
        if name not in table:
            raise ArgvError(f"flag provided but not defined: -{name}")
        i += 1
        if not table[name]:
            value = _go_bool(name, value) if has_value else "true"
        elif not has_value:
            if i >= len(args):
                raise ArgvError(f"flag needs an argument: -{name}")
            value = args[i]
            i += 1
        if name in INT_FLAGS and not _GO_INT.fullmatch(value):
            raise ArgvError(f"invalid value {value!r} for flag -{name}: parse error")
        found[name] = value
        seen.append(name)
    for a, b in _ALIASES:
        if a in seen and b in seen:
            raise ArgvError(f"Cannot use two forms of the same flag: {b} {a}")
    return found, args[i:]


def _is_command_flag(arg: str, table: dict[str, bool]) -> bool:
    """urfave/cli v1's argIsFlag: strip up to two leading dashes and any `=value`, look the name up."""
    if arg in ("-", "--") or not arg.startswith("-"):
        return False
    name = arg.replace("-", "", 2) if arg.startswith("--") else arg
    if name.startswith("-"):
        name = name.replace("-", "", 1)
    return name.split("=")[0] in table


def reorder_command_args(args: list[str], table: dict[str, bool]) -> list[str]:
    """urfave/cli v1's reorderArgs: known flags (and the argument after a flag without `=`) first."""
    flags: list[str] = []
    rest: list[str] = []
    value_may_follow = False
    for i, arg in enumerate(args):
        if value_may_follow and not _is_command_flag(arg, table):
            value_may_follow = False
            flags.append(arg)
        elif arg == "--":
            rest = ["--", *rest, *args[i + 1:]]
            break
        elif _is_command_flag(arg, table):
            flags.append(arg)
            value_may_follow = "=" not in arg
        else:
            rest.append(arg)
    return flags + rest


def parse_runc_argv(args: list[str]) -> RuncCommand:
    """Read args (argv without the program name) as runc does."""
    try:
        global_flags, rest = parse_flags(list(args), GLOBAL_FLAGS)
    except ArgvError as exc:
        return RuncCommand(None, {}, error=str(exc))
    helps = "true" in (global_flags.get("help"), global_flags.get("h"))
    version = "true" in (global_flags.get("version"), global_flags.get("v"))
    if not rest or helps or version:  # urfave/cli: help first, then version, then the command
        return RuncCommand(None, global_flags, prints_version=version and not helps)
    command = rest[0]
    if command not in MODIFIED_COMMANDS:
        return RuncCommand(command, global_flags)
    table = COMMAND_FLAGS[command]
    try:
        flags, positional = parse_flags(reorder_command_args(rest[1:], table), table)
    except ArgvError as exc:
        return RuncCommand(command, global_flags, error=str(exc))
    if "true" in (flags.get("help"), flags.get("h")):
        return RuncCommand(command, global_flags, error="help requested")
    if len(positional) != 1:
        return RuncCommand(command, global_flags, error=f'"{command}" requires exactly 1 argument(s)')
    bundle = flags.get("bundle", flags.get("b"))
    return RuncCommand(command, global_flags, modify=True, bundle=bundle, container_id=positional[0])

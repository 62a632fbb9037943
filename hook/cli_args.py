"""The command line of `nvidia-container-cli`, with the real tool's syntax.

    nvidia-container-cli [GLOBAL OPTIONS] COMMAND [OPTIONS] [ARGS]
    nvidia-container-cli --load-kmods --user configure --device=0 --compute --pid=123 /rootfs

Global options come before the command (containerd, LXC, Apptainer and enroot call it that way):
  -r, --root=PATH          driver root (default: config [nvidia-container-cli] root, then
                           $NVIDIA_CTK_DRIVER_ROOT, then /)
  -l, --ldcache=PATH       the driver root's ld.so.cache (path inside the root)
  -u, --user[=UID[:GID]]   run without host privileges as UID:GID (default: the caller's ids)
  -d, --debug=FILE         write a debug log to FILE
  -k, --load-kmods         accepted; a container host has its modules loaded already
Commands: `info [--csv]`, `list [selection]`, `configure [options] ROOTFS`.

`--user` takes its value only after "=" (the real tool uses argp, whose optional arguments never
take the next word): `--user configure` is the bare flag followed by the command. argparse would
swallow `configure` as the value, so the global part of argv is normalised first.

argparse is used with its exits turned into UsageError, so every mistake is the project's one line
`nvidia-container-cli: error: <what> (<where>)` and never a usage dump or a traceback.

`configure` runs at every container start of ctr (`ctr run --gpus`), LXC and Apptainer, and argparse
with what it imports (re, enum, gettext) costs ~10-20 ms there. So a configure command line spelled
the way those callers spell it (long options, values after "=", the rootfs last) is read by
`fast_configure_args` without argparse, into the same namespace argparse would give; anything else
(short options, a value as the next word, abbreviations, --help, a mistake) goes to argparse.
"""
from __future__ import annotations

import os

from cdi.errors import what_where

PROG = "nvidia-container-cli"

COMMANDS = ("configure", "info", "list")
CAPABILITY_FLAGS = ("compute", "utility", "video", "graphics", "display", "ngx", "compat32")
# Global options that take their value as the next word (or after "=").
_GLOBAL_WITH_VALUE = ("-r", "--root", "-l", "--ldcache", "-d", "--debug")
MAX_ID = 2 ** 32 - 2          # (uid_t)-1 means "no change" to the kernel: never a valid id
MAX_PID = 2 ** 22             # the kernel's pid_max limit


class UsageError(Exception):
    """A command line the tool cannot run: `what` went wrong, `where` (the option)."""

    def __init__(self, what: str, where: str = "command line"):
        super().__init__(what_where(what, where))
        self.what = what
        self.where = where


def _user(value: str) -> tuple[int, int]:
    """UID[:GID] as (uid, gid); an empty value means the caller's effective ids. Without a GID
    the UID is used for both, as ids are numeric here (no passwd lookup on the host for a
    user that exists only in a container)."""
    if value == "":
        return os.geteuid(), os.getegid()
    uid_text, sep, gid_text = value.partition(":")
    ids = []
    for text in (uid_text, gid_text if sep else uid_text):
        if not text.isascii() or not text.isdigit() or int(text) > MAX_ID:
            raise UsageError(f"invalid user {value!r}: expected UID[:GID], numbers up to {MAX_ID}", "--user")
        ids.append(int(text))
    return ids[0], ids[1]


def _pid(value: str) -> int:
    if not value.isascii() or not value.isdigit() or not 0 < int(value) <= MAX_PID:
        raise UsageError(f"invalid pid {value!r}: expected a process id (1..{MAX_PID})", "--pid")
    return int(value)


def _path(option: str):
    def check(value: str) -> str:
        if not value or "\0" in value:
            raise UsageError("empty path" if not value else "path contains a NUL byte", option)
        return value
    return check


def _nonempty(option: str):
    def check(value: str) -> str:
        if not value.strip():
            raise UsageError("empty value", option)
        return value
    return check


def _argparse_classes():
    """The parser class (exits turned into UsageError) and the --version action, made when argparse
    is first needed (see the module docstring)."""
    import argparse

    class Parser(argparse.ArgumentParser):
        def error(self, message):  # argparse would print usage and exit 2
            raise UsageError(message)

    class Version(argparse.Action):
        """--version: the toolkit's line (cdi.version, looked up only when asked), then the
        libnvidia-container command line this one follows, in NVIDIA's own words."""

        def __init__(self, option_strings, dest, **kwargs):
            super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

        def __call__(self, parser, namespace, values, option_string=None):
            from cdi.version import NVIDIA_RELEASE, version_line

            print(f"{version_line(PROG)}\ncli-version: {NVIDIA_RELEASE}")
            parser.exit()

    return Parser, Version


def build_parser():
    _Parser, _Version = _argparse_classes()
    parser = _Parser(prog=PROG, description="Configure containers with NVIDIA GPU support.")
    parser.add_argument("-r", "--root", type=_path("--root"), metavar="PATH", help="driver root")
    parser.add_argument("-l", "--ldcache", type=_path("--ldcache"), metavar="PATH",
                        help="path of the driver root's ld.so.cache, inside the root")
    parser.add_argument("-u", "--user", type=_user, nargs="?", const=None, default=None,
                        metavar="UID[:GID]", help="run without host privileges, as UID:GID")
    parser.add_argument("-d", "--debug", type=_path("--debug"), metavar="FILE", help="write a debug log to FILE")
    parser.add_argument("-k", "--load-kmods", action="store_true",
                        help="accepted for compatibility: kernel modules are loaded by the host")
    parser.add_argument("-V", "--version", action=_Version, help="print the version and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    info = commands.add_parser("info", help="the driver and the GPUs it reports")
    info.add_argument("--csv", action="store_true", help="CSV output")

    listing = commands.add_parser("list", help="the host files and device nodes a container would get")
    listing.add_argument("-d", "--device", action="append", type=_nonempty("--device"), default=[],
                         metavar="ID", help="device UUID(s) or index(es) to list")
    listing.add_argument("-l", "--libraries", action="store_true", help="list driver libraries")
    listing.add_argument("-b", "--binaries", action="store_true", help="list driver binaries")
    listing.add_argument("-i", "--ipcs", action="store_true", help="list driver IPC sockets")
    listing.add_argument("-f", "--firmwares", action="store_true", help="list driver firmware")
    listing.add_argument("--compat32", action="store_true", help="also 32-bit libraries")
    _add_extras(listing)

    configure = commands.add_parser("configure", help="inject GPUs into a container")
    configure.add_argument("-p", "--pid", type=_pid, metavar="PID",
                           help="a process of the container (its mount namespace and cgroup)")
    configure.add_argument("-d", "--device", action="append", type=_nonempty("--device"), default=[],
                           metavar="ID", help="device UUID(s), index(es) or all")
    configure.add_argument("-r", "--require", action="append", default=[], metavar="EXPR",
                           help="a requirement the devices must meet (cuda>=12.0 ...)")
    configure.add_argument("-l", "--ldconfig", type=_path("--ldconfig"), metavar="PATH",
                           help="ldconfig to run (@PATH: a host binary)")
    for short, flag in (("-c", "compute"), ("-u", "utility"), ("-v", "video"), ("-g", "graphics"),
                        ("-D", "display"), ("-n", "ngx")):
        configure.add_argument(short, f"--{flag}", action="store_true", help=f"{flag} capability")
    configure.add_argument("--compat32", action="store_true", help="32-bit libraries too")
    _add_extras(configure)
    for flag, what in (("no-cgroups", "leave device cgroups alone"),
                       ("no-devbind", "do not bind-mount the GPU device nodes"),
                       ("no-persistenced", "do not mount the nvidia-persistenced socket"),
                       ("no-fabricmanager", "do not mount the nvidia-fabricmanager socket"),
                       ("no-gsp-firmware", "do not mount GSP firmware")):
        configure.add_argument(f"--{flag}", action="store_true", help=what)
    configure.add_argument("rootfs", type=_path("ROOTFS"), metavar="ROOTFS",
                           help="the container's root filesystem")
    return parser


def _add_extras(parser) -> None:
    parser.add_argument("--mig-config", action="append", type=_nonempty("--mig-config"), default=[],
                        metavar="ID", help="GPUs whose MIG configuration the container may change")
    parser.add_argument("--mig-monitor", action="append", type=_nonempty("--mig-monitor"), default=[],
                        metavar="ID", help="GPUs whose MIG devices the container may monitor")
    parser.add_argument("--imex-channel", action="append", type=_nonempty("--imex-channel"), default=[],
                        metavar="ID", help="IMEX channel(s) to inject")


def normalize_argv(argv: list[str]) -> list[str]:
    """argv with a bare global `--user`/`-u` spelled `--user=`, so that argparse never takes the
    command name as its value (see the module docstring). Only the global part is touched: after
    the command, `-u` means `--utility`."""
    out = list(argv)
    index = 0
    while index < len(out):
        token = out[index]
        if token == "--" or not token.startswith("-") or token == "-":
            break                       # the command (or a stray argument) ends the global part
        if token in ("--user", "-u"):
            out[index] = "--user="
        elif token in _GLOBAL_WITH_VALUE:
            index += 1                  # its value is the next word, whatever it looks like
        index += 1
    return out


# configure's options as fast_configure_args reads them: flags, and options whose values are listed
_CONFIGURE_FLAGS = {f"--{name}": name.replace("-", "_") for name in (
    *CAPABILITY_FLAGS, "no-cgroups", "no-devbind", "no-persistenced", "no-fabricmanager", "no-gsp-firmware")}
_CONFIGURE_LISTS = {"--device": ("device", _nonempty("--device")), "--require": ("require", None),
                    "--mig-config": ("mig_config", _nonempty("--mig-config")),
                    "--mig-monitor": ("mig_monitor", _nonempty("--mig-monitor")),
                    "--imex-channel": ("imex_channel", _nonempty("--imex-channel"))}
_GLOBAL_VALUES = {"--root": "root", "--ldcache": "ldcache", "--debug": "debug"}


class Namespace:
    """What argparse.Namespace is to the commands: parsed options as attributes (compared by them)."""

    def __init__(self, **kwargs) -> None:
        self.__dict__.update(kwargs)

    def __eq__(self, other) -> bool:
        return vars(self) == vars(other)


def fast_configure_args(argv: list[str]) -> Namespace | None:
    """The namespace argparse would give for a plain `configure` command line (see the module
    docstring), or None when argv is spelled any other way (argparse then reads it). Values are
    checked by the same functions argparse calls, so a bad value is the same UsageError."""
    args = Namespace(root=None, ldcache=None, user=None, debug=None, load_kmods=False, command="configure",
                     pid=None, ldconfig=None, **{dest: False for dest in _CONFIGURE_FLAGS.values()},
                     **{dest: [] for dest, _ in _CONFIGURE_LISTS.values()})
    words = iter(argv)
    for word in words:                          # the global options, up to the command
        name, eq, value = word.partition("=")
        if word == "configure":
            break
        if word in ("--load-kmods", "-k"):
            args.load_kmods = True
        elif word in ("--user", "-u") or name == "--user" and eq:
            args.user = _user(value)
        elif name in _GLOBAL_VALUES and eq:
            setattr(args, _GLOBAL_VALUES[name], _path(name)(value))
        else:
            return None
    else:
        return None
    rest = list(words)
    if not rest or rest[-1].startswith("-"):
        return None
    for word in rest[:-1]:
        name, eq, value = word.partition("=")
        if word in _CONFIGURE_FLAGS:
            setattr(args, _CONFIGURE_FLAGS[word], True)
        elif name in _CONFIGURE_LISTS and eq:
            dest, check = _CONFIGURE_LISTS[name]
            getattr(args, dest).append(check(value) if check else value)
        elif name == "--pid" and eq:
            args.pid = _pid(value)
        elif name == "--ldconfig" and eq:
            args.ldconfig = _path("--ldconfig")(value)
        else:
            return None
    args.rootfs = _path("ROOTFS")(rest[-1])
    return args


def parse_args(argv: list[str]):
    """The parsed command line; raises UsageError. `user` is None (no --user) or (uid, gid)."""
    fast = fast_configure_args(argv)
    if fast is not None:
        return fast
    return build_parser().parse_args(normalize_argv(argv))

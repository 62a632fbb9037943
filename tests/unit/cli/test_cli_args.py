"""The nvidia-container-cli command line: every flag of the real tool, in its syntax (globals before
the command, `--user` with an optional `=` value), and one-line errors for everything else."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hook.cli_args import UsageError, normalize_argv, parse_args


def test_containerd_argv_parses_completely():
    # what `ctr run --gpus 0` passes through `containerd oci-hook` (docs/reference.md#ctr-gpus)
    args = parse_args(["--load-kmods", "configure", "--device=0", "--compute", "--compat32", "--graphics",
                       "--utility", "--video", "--display", "--pid=4242", "/run/c/rootfs"])
    assert args.command == "configure" and args.load_kmods
    assert (args.device, args.pid, args.rootfs) == (["0"], 4242, "/run/c/rootfs")
    assert all(getattr(args, c) for c in ("compute", "compat32", "graphics", "utility", "video", "display"))
    assert not args.ngx and args.user is None


def test_every_configure_flag_long_form():
    args = parse_args(["--root=/drv", "--ldcache=/etc/ld.so.cache.x", "--user=1000:1001", "--debug=/tmp/log",
                       "--load-kmods", "configure", "--pid=7", "--device=0,1", "--device=GPU-abc",
                       "--require=cuda>=12.0", "--require=brand=Tesla", "--ldconfig=@/sbin/ldconfig.real",
                       "--compute", "--utility", "--video", "--graphics", "--display", "--ngx", "--compat32",
                       "--mig-config=0", "--mig-monitor=1", "--imex-channel=3", "--no-cgroups", "--no-devbind",
                       "--no-persistenced", "--no-fabricmanager", "--no-gsp-firmware", "/rootfs"])
    assert (args.root, args.ldcache, args.user, args.debug) == ("/drv", "/etc/ld.so.cache.x", (1000, 1001), "/tmp/log")
    assert args.device == ["0,1", "GPU-abc"]
    assert args.require == ["cuda>=12.0", "brand=Tesla"]
    assert args.ldconfig == "@/sbin/ldconfig.real"
    assert (args.mig_config, args.mig_monitor, args.imex_channel) == (["0"], ["1"], ["3"])
    for flag in ("compute", "utility", "video", "graphics", "display", "ngx", "compat32", "no_cgroups",
                 "no_devbind", "no_persistenced", "no_fabricmanager", "no_gsp_firmware"):
        assert getattr(args, flag) is True, flag


def test_short_forms_mean_different_things_before_and_after_the_command():
    # globally -r/-l/-u/-d are root/ldcache/user/debug; after `configure` they are require/ldconfig/utility/device
    args = parse_args(["-r", "/drv", "-l", "/cache", "-u", "-d", "/tmp/log", "-k", "configure",
                       "-p", "9", "-d", "1", "-r", "driver>=500", "-l", "@/sbin/ldconfig",
                       "-c", "-u", "-v", "-g", "-D", "-n", "/rootfs"])
    assert (args.root, args.ldcache, args.debug, args.load_kmods) == ("/drv", "/cache", "/tmp/log", True)
    assert args.user == (os.geteuid(), os.getegid())
    assert (args.pid, args.device, args.require, args.ldconfig) == (9, ["1"], ["driver>=500"], "@/sbin/ldconfig")
    assert all(getattr(args, c) for c in ("compute", "utility", "video", "graphics", "display", "ngx"))


@pytest.mark.parametrize("argv, user", [
    (["--user", "configure", "/r"], "self"),           # LXC: bare flag, then the command
    (["-u", "info"], "self"),
    (["--user=", "info"], "self"),
    (["--user=5", "info"], (5, 5)),
    (["--user=5:6", "info"], (5, 6)),
    (["-u7:8", "info"], (7, 8)),
    (["info"], None),
])
def test_user_value_only_after_equals(argv, user):
    args = parse_args(argv)
    expected = (os.geteuid(), os.getegid()) if user == "self" else user
    assert args.user == expected
    assert args.command in ("configure", "info")


def test_normalize_leaves_values_and_the_command_part_alone():
    # `--root -u` : "-u" is the root's value, not the user flag; after the command -u is --utility
    assert normalize_argv(["--root", "-u", "configure", "-u", "/r"]) == ["--root", "-u", "configure", "-u", "/r"]
    assert normalize_argv(["-k", "-u", "list"]) == ["-k", "--user=", "list"]


def test_list_and_info_flags():
    args = parse_args(["list", "-d", "0", "--device=1:0", "-l", "-b", "-i", "-f", "--compat32",
                       "--mig-config=0", "--mig-monitor=0", "--imex-channel=1,2"])
    assert args.device == ["0", "1:0"]
    assert (args.libraries, args.binaries, args.ipcs, args.firmwares, args.compat32) == (True,) * 5
    assert (args.mig_config, args.mig_monitor, args.imex_channel) == (["0"], ["0"], ["1,2"])
    assert parse_args(["info", "--csv"]).csv is True
    assert parse_args(["info"]).csv is False


@pytest.mark.parametrize("argv, fragment, where", [
    ([], "required: COMMAND", "command line"),
    (["bogus"], "invalid choice: 'bogus'", "command line"),
    (["configure", "--pid=1"], "required: ROOTFS", "command line"),
    (["configure", "--pid=0", "/r"], "invalid pid '0'", "--pid"),
    (["configure", "--pid=abc", "/r"], "invalid pid 'abc'", "--pid"),
    (["configure", "--pid=99999999", "/r"], "invalid pid", "--pid"),
    (["configure", "--frobnicate", "/r"], "unrecognized arguments: --frobnicate", "command line"),
    (["configure", "--device=", "/r"], "empty value", "--device"),
    (["configure", ""], "empty path", "ROOTFS"),
    (["--user=root", "info"], "invalid user 'root'", "--user"),
    (["--user=1:x", "info"], "invalid user '1:x'", "--user"),
    (["--user=4294967295", "info"], "invalid user", "--user"),
    (["--root=", "info"], "empty path", "--root"),
    (["info", "--root=/x"], "unrecognized arguments: --root=/x", "command line"),  # globals go first
    (["list", "--pid=1"], "unrecognized arguments: --pid=1", "command line"),
    (["--root"], "expected one argument", "command line"),
])
def test_bad_command_lines_are_usage_errors_naming_where(argv, fragment, where):
    with pytest.raises(UsageError) as caught:
        parse_args(argv)
    assert fragment in caught.value.what
    assert caught.value.where == where


@pytest.mark.parametrize("argv", [["configure"], ["--user=x", "info"], ["info", "--nope"], []])
def test_program_prints_one_line_and_exits_2(argv):
    done = subprocess.run([sys.executable, "-m", "hook.cli", *argv], capture_output=True, text=True)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nvidia-container-cli: error: "), done.stderr
    assert lines[0].endswith(")") and "Traceback" not in done.stderr
    assert done.stdout == ""


def test_version_and_help_exit_0():
    done = subprocess.run([sys.executable, "-m", "hook.cli", "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("nvidia-container-cli ")
    done = subprocess.run([sys.executable, "-m", "hook.cli", "configure", "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "--no-gsp-firmware" in done.stdout and "ROOTFS" in done.stdout


# configure command lines as ctr, LXC's hooks/nvidia and Apptainer spell them, and others
FAST = [
    ["--load-kmods", "configure", "--device=0", "--compute", "--compat32", "--graphics", "--utility", "--video",
     "--display", "--pid=4242", "/run/c/rootfs"],
    ["--user", "configure", "--no-cgroups", "--ldconfig=@/sbin/ldconfig", "--device=0", "--compute", "--utility",
     "/usr/lib/x86_64-linux-gnu/lxc/rootfs"],
    ["--root=/drv", "--ldcache=/etc/ld.so.cache.x", "--user=1000:1001", "--debug=/tmp/log", "-k", "configure",
     "--pid=7", "--device=0,1", "--device=GPU-abc", "--require=cuda>=12.0", "--require=brand=Tesla",
     "--ldconfig=@/sbin/ldconfig.real", "--compute", "--utility", "--video", "--graphics", "--display", "--ngx",
     "--compat32", "--mig-config=0", "--mig-monitor=1", "--imex-channel=3", "--no-cgroups", "--no-devbind",
     "--no-persistenced", "--no-fabricmanager", "--no-gsp-firmware", "/rootfs"],
    ["-u", "configure", "--device=all", "/r"],
    ["--user=", "configure", "--pid=1", "--pid=2", "/r"],
    ["configure", "/r"],
]
ARGPARSE_ONLY = [
    ["configure", "-c", "/r"], ["configure", "--device", "0", "/r"], ["configure", "--dev=0", "/r"],
    ["--root", "/drv", "configure", "/r"], ["configure", "/r", "--compute"], ["configure", "--", "/r"],
    ["configure", "/a", "/b"], ["configure"], ["info"], ["list", "--libraries"], ["configure", "--help"],
    ["--version"], ["configure", "--compute=1", "/r"], ["--load-kmods=1", "configure", "/r"], [],
    ["configure", "-/r"],
]


@pytest.mark.parametrize("argv", FAST)
def test_a_plain_configure_line_is_read_without_argparse_as_argparse_reads_it(argv):
    from hook.cli_args import build_parser, fast_configure_args

    fast = fast_configure_args(argv)
    assert fast is not None
    assert vars(fast) == vars(build_parser().parse_args(normalize_argv(argv)))
    assert vars(parse_args(argv)) == vars(fast)


@pytest.mark.parametrize("argv", ARGPARSE_ONLY)
def test_any_other_spelling_goes_to_argparse(argv):
    from hook.cli_args import fast_configure_args

    assert fast_configure_args(argv) is None


@pytest.mark.parametrize("argv, where", [(["configure", "--pid=x", "/r"], "--pid"),
                                         (["configure", "--device=", "/r"], "--device"),
                                         (["--user=a", "configure", "/r"], "--user"),
                                         (["--root=", "configure", "/r"], "--root")])
def test_a_bad_value_is_the_same_error_on_both_paths(argv, where):
    from hook.cli_args import build_parser

    with pytest.raises(UsageError) as fast:
        parse_args(argv)
    with pytest.raises(UsageError) as slow:
        build_parser().parse_args(normalize_argv(argv))
    assert (fast.value.what, fast.value.where) == (slow.value.what, slow.value.where)
    assert fast.value.where == where


def test_ctr_and_lxc_lines_do_not_import_argparse():
    code = ("import sys; from hook.cli_args import parse_args; "
            "parse_args(['--load-kmods', 'configure', '--device=0', '--compute', '--pid=1', '/r']); "
            "parse_args(['--user', 'configure', '--no-cgroups', '--device=0', '/r']); "
            "print('argparse' in sys.modules)")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", f"import sys; sys.path[:0] = {sys.path!r}; {code}"],
                          capture_output=True, text=True, check=True)
    assert done.stdout == "False\n"


def test_without_debug_logging_is_imported_only_when_a_message_reaches_it():
    # configure runs at every container start of ctr and LXC: a quiet run never imports logging, and an
    # error logged on the way is still one line on stderr
    code = ("import sys; from hook.cli import setup_debug_log; from cdi.log import get_logger; "
            "setup_debug_log(None); log = get_logger('x'); log.debug('not shown'); "
            "print('logging' in sys.modules); log.error('bad\\nthing'); print('logging' in sys.modules)")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", f"import sys; sys.path[:0] = {sys.path!r}; {code}"],
                          capture_output=True, text=True, check=True)
    assert done.stdout == "False\nTrue\n"
    assert done.stderr == "nvidia-container-cli: ERROR: bad\\nthing\n"

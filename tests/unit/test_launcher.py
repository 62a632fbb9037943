"""The static launcher: a hostile caller's environment must not reach the Python program it starts."""
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import click
import pytest

from cdi.errors import MAX_WORD, printable
from cdi.nvml import NVML_INVENTORY_PROGRAM
from launcher import install_launchers
from runtime_shim import executable

PROBE = "gct-launcher-probe"
PROBE_CTK = "gct-launcher-probe-ctk"   # the probe, classifying its command line as nvidia-ctk does


@pytest.fixture(scope="module")
def bindir(tmp_path_factory):
    path = tmp_path_factory.mktemp("launchers") / "bin"   # gct-nvml-inventory goes into ../libexec
    names = install_launchers.install(path, sys.executable)
    assert PROBE in names and NVML_INVENTORY_PROGRAM not in names
    return path


def run_probe(bindir, env, args=(), argv0=None, program=None):
    exe = str(program or bindir / PROBE)
    result = subprocess.run([argv0 or exe, *args], executable=exe, env=env, capture_output=True,
                            text=True, stdin=subprocess.DEVNULL, timeout=30)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def run_program(bindir, name, args, env, cwd=None):
    return subprocess.run([str(bindir / name), *args], env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=30, cwd=cwd)


def build_preload(tmp_path, marker):
    """A library whose constructor writes marker: proof that the loader honoured LD_PRELOAD."""
    source = tmp_path / "preload.c"
    source.write_text(
        '#include <stdio.h>\n__attribute__((constructor)) static void pwn(void)'
        f'{{ FILE *f = fopen("{marker}", "w"); if (f) {{ fputs("preload", f); fclose(f); }} }}\n')
    preload = tmp_path / "preload.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(preload), str(source)], check=True)
    # the preload library works when honoured: prove the test can fail
    subprocess.run(["/bin/true"], env={"LD_PRELOAD": str(preload)}, check=True)
    assert marker.read_text() == "preload"
    marker.unlink()
    return preload


def test_launcher_binary_is_static(bindir):
    headers = subprocess.run(["readelf", "-l", str(bindir / PROBE)], capture_output=True, text=True,
                             check=True).stdout
    assert "INTERP" not in headers, "a dynamic launcher would honour LD_PRELOAD"


def test_environment_is_reduced_to_the_allowlist(bindir):
    env = {"PATH": "/usr/bin:/bin", "NVIDIA_VISIBLE_DEVICES": "1", "NVIDIA_CTK_CONFIG_FILE_PATH": "/x.toml",
           "XDG_CONFIG_HOME": "/cfg", "HOME": "/root", "LD_LIBRARY_PATH": "/evil", "SECRET": "s",
           "NVIDIAX": "not a prefix match"}
    seen = run_probe(bindir, env)["env"]
    seen.pop("LC_CTYPE", None)  # set by Python's own C-locale coercion, not passed through
    assert seen == {"PATH": "/usr/bin:/bin", "NVIDIA_VISIBLE_DEVICES": "1",
                    "NVIDIA_CTK_CONFIG_FILE_PATH": "/x.toml", "XDG_CONFIG_HOME": "/cfg"}


def test_path_gets_a_default_when_the_caller_has_none(bindir):
    seen = run_probe(bindir, {})["env"]
    assert seen["PATH"] == "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def test_python_runs_isolated_without_site(bindir):
    seen = run_probe(bindir, {}, args=["a", "b c"])
    assert seen["flags"] == {"isolated": 1, "no_site": 1, "ignore_environment": 1}
    assert seen["argv"] == [PROBE, "a", "b c"]
    assert "site" not in seen["modules"]


def test_hostile_python_variables_and_ld_preload_have_no_effect(bindir, tmp_path):
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil"
    evil.mkdir()
    payload = f"open({str(marker)!r}, 'w').write('python')\n"
    for name in ("sitecustomize.py", "usercustomize.py", "json.py", "startup.py"):
        (evil / name).write_text(payload)
    preload = build_preload(tmp_path, marker)

    env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(preload), "PYTHONPATH": str(evil),
           "PYTHONHOME": str(evil), "PYTHONSTARTUP": str(evil / "startup.py"), "PYTHONINSPECT": "1",
           "PYTHONUSERBASE": str(evil), "PYTHONSAFEPATH": "", "PYTHONNOUSERSITE": ""}
    seen = run_probe(bindir, env)
    assert not marker.exists()
    assert str(evil) not in seen["path"]
    assert not any(k.startswith(("PYTHON", "LD_")) for k in seen["env"])


# Every variable glibc's secure mode removes (sysdeps/generic/unsecvars.h), and more of the LD_* and
# MALLOC_* families: none may reach the interpreter, whichever program and command line.
UNSECURE = {name: "/evil" for name in (
    "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "LD_DEBUG", "LD_DEBUG_OUTPUT", "LD_DYNAMIC_WEAK", "LD_HWCAP_MASK",
    "LD_ORIGIN_PATH", "LD_PROFILE", "LD_SHOW_AUXV", "LD_BIND_NOW", "LD_ASSUME_KERNEL", "GCONV_PATH",
    "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH", "MALLOC_TRACE", "MALLOC_ARENA_MAX",
    "MALLOC_CHECK_", "NIS_PATH", "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS", "TMPDIR", "TZDIR")}

# Global options before nvidia-ctk's `hook`, as a spec written for some nvidia-ctk may spell them: each
# runs the hook in C (nvidia-cdi-hook inside the launcher), never an interpreter.
HOOK_SPELLINGS = [
    [], ["--debug"], ["--debug", "--debug"], ["--"], ["--debug", "--"], ["-d"], ["-debug"], ["--quiet"], ["-q"],
    ["-quiet"], ["-dq"], ["-qd"], ["-d", "-q"], ["--debug=true"], ["--debug=false"], ["-d=1"], ["-q=true"],
    ["--quiet=false"], ["-debug=1"], ["--log-level=debug"], ["--log-level", "debug"],
    ["--log-level", "debug", "--quiet"], ["--config", "/x.toml", "-d"], ["-d", "--log-level", "debug"],
    ["--unknown"], ["--unknown", "--"],
]
# Command lines click cannot take (or that only print): never the hook, never the caller's environment.
NOT_CLICKS = [["--help"], ["-h"], ["--version"], ["-h", "--debug"], ["--debug", "--help"], ["--deb"],
              ["--debug=1"], ["-q=true"], ["--log-level", "debug"]]


def click_command(args):
    """The command ctk's click group runs for args: None for a usage error, help or the version."""
    from ctk.group import cli

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)   # protected_args: click 8.2 to 9
            ctx = cli.make_context("nvidia-ctk", list(args))
            rest = [*ctx.protected_args, *ctx.args]
    except (click.exceptions.Exit, click.UsageError):
        return None
    return cli.resolve_command(ctx, rest)[0] if rest else None


def ran_native_hook(done):
    """Whether the C hook answered (`hook chmod`: one warning), not the Python probe (JSON)."""
    return (done.returncode, done.stdout, done.stderr) == (
        0, "", "nvidia-cdi-hook: warning: ignoring unknown subcommand 'chmod'\n")


@pytest.mark.parametrize("spelling", HOOK_SPELLINGS, ids=" ".join)
def test_every_spelling_of_nvidia_ctk_hook_runs_the_hook_in_c(bindir, tmp_path, spelling):
    marker = tmp_path / "pwned"
    preload = build_preload(tmp_path, marker)
    done = run_program(bindir, PROBE_CTK, [*spelling, "hook", "chmod"], {"PATH": "/usr/bin:/bin",
                                                                         "LD_PRELOAD": str(preload)})
    assert ran_native_hook(done), done
    assert not marker.exists()


@pytest.mark.parametrize("spelling", HOOK_SPELLINGS + NOT_CLICKS + [["--debug", "--version"], ["--frob"]],
                         ids=" ".join)
def test_the_launcher_runs_the_hook_in_c_whenever_click_would_run_hook(bindir, spelling):
    """click runs its own `hook` command only where the launcher runs the C one: Python never runs a hook
    with the caller's environment."""
    args = [*spelling, "hook", "chmod"]
    if click_command(args) == "hook":
        assert ran_native_hook(run_program(bindir, PROBE_CTK, args, {}))


def test_click_runs_hook_for_its_own_spellings():
    """The other test's premise: click's group does reach `hook` (else it proves nothing)."""
    spellings = ([], ["--debug"], ["--"], ["-d"], ["-q"], ["--quiet"], ["-dq"], ["-d", "--quiet"])
    assert [click_command([*spelling, "hook", "chmod"]) for spelling in spellings] == ["hook"] * len(spellings)
    assert all(click_command([*spelling, "cdi", "list"]) is None for spelling in NOT_CLICKS)


@pytest.mark.parametrize("args, keeps_caller_env", [
    (["cdi", "list"], True), (["--debug", "cdi", "list"], True), (["--", "info"], True), ([], True),
    (["--help"], True),
    (["-d", "cdi", "list"], True), (["-q", "--debug", "info"], True), (["--quiet", "info"], True),
    (["-dq", "info"], False),   # a bundle: click takes it, the launcher does not tell: the allowlist
    (["--debug=true", "cdi", "list"], False), (["-q=true", "info"], False),
    (["--log-level", "debug", "info"], False), (["--frob", "x", "hook2"], False),
    (["--help", "hook", "update-ldcache"], False), (["--version", "hook"], False), (["-h", "--", "hook"], False),
])
def test_nvidia_ctk_gives_python_no_unsecure_variable(bindir, tmp_path, args, keeps_caller_env):
    """The admin's command lines keep the caller's environment less the loader's variables; any other
    that reaches Python (click prints a usage error, help or the version) gets the allowlist."""
    marker = tmp_path / "pwned"
    env = {**UNSECURE, "LD_PRELOAD": str(build_preload(tmp_path, marker)), "HOME": "/root",
           "PATH": "/usr/bin:/bin", "NVIDIA_VISIBLE_DEVICES": "all"}
    done = run_program(bindir, PROBE_CTK, args, env)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["argv"][1:] == args
    assert not marker.exists()
    assert not set(UNSECURE) & set(seen["env"])
    assert ("HOME" in seen["env"]) == keeps_caller_env
    assert seen["env"]["NVIDIA_VISIBLE_DEVICES"] == "all"


@pytest.mark.parametrize("program", ["nvidia-ctk", "nvidia-container-runtime-hook", "nvidia-container-cli"])
@pytest.mark.parametrize("spelling", [["--debug=true"], ["-d=1"], ["--quiet=false"], ["--log-level", "debug"],
                                      ["--version"], []])
def test_no_program_lets_ld_preload_into_the_interpreter(bindir, tmp_path, program, spelling):
    """Whatever the program and the command line, the installed launchers start no code of the caller's
    (the runtime shim passes its caller's environment, the engine's, on to the low-level runtime: not here)."""
    marker = tmp_path / "pwned"
    env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(build_preload(tmp_path, marker)),
           "NVIDIA_CTK_CONFIG_FILE_PATH": str(tmp_path / "none.toml"), "NVIDIA_CTK_CACHE_DIR": str(tmp_path)}
    # in tmp_path: nvidia-container-cli's --debug=true writes its log to ./true
    run_program(bindir, program, [*spelling, "hook", "update-ldcache", "--folder", "/usr/lib"], env, tmp_path)
    run_program(bindir, program, [*spelling, "info"], env, tmp_path)
    assert not marker.exists()


def test_program_is_chosen_by_file_name_not_argv0(bindir, tmp_path):
    link = tmp_path / "nvidia-container-runtime-hook"
    link.symlink_to(bindir / PROBE)
    seen = run_probe(bindir, {}, program=link, argv0="nvidia-container-runtime-hook")
    assert seen["argv"][0] == PROBE


def test_unknown_program_name_is_a_clear_error(bindir, tmp_path):
    copy = tmp_path / "some-other-name"
    copy.write_bytes((bindir / PROBE).read_bytes())
    copy.chmod(0o755)
    result = subprocess.run([str(copy)], capture_output=True, text=True, env={})
    assert result.returncode == 127
    assert result.stderr.startswith("some-other-name: error: this launcher does not know a program")
    assert result.stderr.count("\n") == 1


def test_an_over_long_unknown_name_is_one_bounded_line(bindir, tmp_path):
    """The launcher's own file name comes from outside (any copy or link of it): its error line shows it
    printable and bounded as the Python programs' lines are (cdi.errors.printable), byte for byte."""
    name = "\x1b[31m" * 40 + "n" * 50   # 250 bytes; escaped, 410 characters without a space
    copy = tmp_path / name
    copy.write_bytes((bindir / PROBE).read_bytes())
    copy.chmod(0o755)
    result = subprocess.run([str(copy)], capture_output=True, text=True, env={})
    assert result.returncode == 127
    assert result.stderr == (f"{printable(name)}: error: this launcher does not know a program of that name "
                             "(No such file or directory)\n")
    assert len(printable(name)) == MAX_WORD and "..." in printable(name) and "\x1b" not in result.stderr


def test_program_table_in_c_matches_the_installer():
    source = Path(install_launchers.LAUNCHER_SOURCE).read_text()
    table = dict(re.findall(r'\{"([^"]+)", "([^":]+):[^"]+", \w+, [^}]+\}', source))
    native = re.findall(r'\{"([^"]+)", NULL, \w+, NULL, 0\}', source)
    assert native == ["nvidia-cdi-hook"]
    assert {**table, **dict.fromkeys(native)} == install_launchers.PROGRAMS
    assert f'#define INTERPRETER_FILE "{install_launchers.INTERPRETER_FILE}"' in source


def test_nvidia_cdi_hook_runs_without_python(tmp_path):
    """nvidia-cdi-hook is C inside the launcher: a launcher whose interpreter does not exist runs it
    all the same (while a Python program from the same build cannot start)."""
    bindir = tmp_path / "bin"
    names = install_launchers.install(bindir, "/nonexistent/python3")
    assert "nvidia-cdi-hook" in names
    done = subprocess.run([str(bindir / "nvidia-cdi-hook"), "--help"], capture_output=True, text=True, env={},
                          stdin=subprocess.DEVNULL, timeout=30)
    assert done.returncode == 0 and "create-symlinks  --link TARGET::LINK" in done.stdout, done.stderr
    done = subprocess.run([str(bindir / "nvidia-cdi-hook"), "chmod"], capture_output=True, text=True, env={},
                          stdin=subprocess.DEVNULL, timeout=30)
    assert (done.returncode, done.stderr) == (0, "nvidia-cdi-hook: warning: ignoring unknown subcommand 'chmod'\n")
    probe = subprocess.run([str(bindir / PROBE)], capture_output=True, text=True, env={}, timeout=30)
    assert probe.returncode == 127 and "cannot execute /nonexistent/python3" in probe.stderr


def test_a_file_planted_in_the_bin_dir_is_never_written_through(tmp_path):
    """The launchers are built elsewhere and written under fresh names made with O_EXCL: symlinks at
    the temp names an install used to write (".gct-launcher.tmp", ".<program>.tmp") are left alone,
    the file they lead to is not written, and every program is a regular file of its own."""
    bindir, libexec, victim = tmp_path / "bin", tmp_path / "libexec", tmp_path / "victim"
    bindir.mkdir()
    libexec.mkdir()
    victim.write_text("keep")
    planted = [".gct-launcher.tmp", ".nvidia-ctk.tmp", ".nvidia-cdi-hook.tmp"]
    for name in planted:
        os.symlink(victim, bindir / name)
    os.symlink(victim, libexec / f".{NVML_INVENTORY_PROGRAM}.tmp")
    names = install_launchers.install(bindir, sys.executable)
    assert victim.read_bytes() == b"keep"
    assert sorted(p.name for p in bindir.iterdir()) == sorted([*names, *planted])
    assert sorted(p.name for p in libexec.iterdir()) == sorted([NVML_INVENTORY_PROGRAM, f".{NVML_INVENTORY_PROGRAM}.tmp"])
    assert all(os.readlink(bindir / name) == str(victim) for name in planted)
    for path in [*(bindir / name for name in names), libexec / NVML_INVENTORY_PROGRAM]:
        st = os.lstat(path)
        assert stat.S_ISREG(st.st_mode) and st.st_mode & 0o777 == 0o755 and st.st_nlink == 1, path
    done = subprocess.run([str(bindir / "nvidia-cdi-hook"), "--help"], capture_output=True, env={}, timeout=30)
    assert done.returncode == 0, done.stderr


def test_a_failed_install_leaves_no_temp_file(tmp_path):
    bindir = tmp_path / "bin"
    (bindir / "nvidia-ctk" / "in-the-way").mkdir(parents=True)   # os.replace cannot put a file there
    with pytest.raises(IsADirectoryError):
        install_launchers.install(bindir, sys.executable)
    assert not [p.name for p in bindir.iterdir() if p.name.endswith(".tmp")]


def test_c_string_escapes_everything_unusual():
    assert install_launchers.c_string('a"b\\c?\n\u00e9') == '"a\\"b\\\\c\\?\\012\\303\\251"'


def dynamic_section(path: Path) -> str:
    return subprocess.run(["readelf", "-l", "-d", "-S", str(path)], capture_output=True, text=True, check=True).stdout


def test_the_nvml_reader_is_installed_in_libexec_and_linked_dynamically(bindir):
    """gct-nvml-inventory must dlopen NVML, which a static launcher cannot: an internal helper, it goes
    into the installation's libexec/ beside bin/ (off PATH, issue 27 item 9), where the runtime shim
    records it for the launcher and cdi.nvml finds it; --help and --version answer."""
    from cdi.nvml import inventory_program, libexec_dir

    program = bindir.parent / "libexec" / NVML_INVENTORY_PROGRAM
    assert os.access(program, os.X_OK) and not (bindir / NVML_INVENTORY_PROGRAM).exists()
    assert libexec_dir(str(bindir)) == str(program.parent)
    assert inventory_program(str(bindir)) == str(program)
    assert inventory_program(str(bindir) + "/") == str(program)
    headers = dynamic_section(program)
    assert "INTERP" in headers and "libc.so.6" in headers
    done = subprocess.run([str(program)], capture_output=True, text=True, env={}, stdin=subprocess.DEVNULL,
                          timeout=30)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == ("gct-nvml-inventory: error: expected LIBRARY MIG_MINORS TIMEOUT_SECONDS (see --help), "
                           "got 0 arguments (command line)\n")
    for flag in ("--help", "-h"):
        done = subprocess.run([str(program), flag], capture_output=True, text=True, env={}, timeout=30)
        assert done.returncode == 0 and done.stderr == "", done.stderr
        assert done.stdout.startswith("usage: gct-nvml-inventory LIBRARY MIG_MINORS TIMEOUT_SECONDS\n")
        assert "internal helper" in done.stdout
    from cdi.version import toolkit_version
    for flag in ("--version", "-v"):
        done = subprocess.run([str(program), flag], capture_output=True, text=True, env={}, timeout=30)
        assert (done.returncode, done.stdout) == (0, f"gct-nvml-inventory (gpu-container-toolkit) {toolkit_version()}\n")


@pytest.fixture(scope="module")
def wheel_bindir(tmp_path_factory):
    """The launchers as the wheel carries them: no interpreter baked in."""
    path = tmp_path_factory.mktemp("wheel-bin")
    helper_dir = tmp_path_factory.mktemp("wheel-data")
    names = install_launchers.build_wheel_scripts(path, helper_dir, "9.8.7")
    assert "nvidia-ctk" in names and PROBE not in names and NVML_INVENTORY_PROGRAM not in names
    helper = helper_dir / NVML_INVENTORY_PROGRAM
    assert "INTERP" in dynamic_section(helper)
    assert ".symtab" not in dynamic_section(helper)   # stripped, as the launchers are
    assert subprocess.run([str(helper), "--version"], capture_output=True, text=True, timeout=30).stdout == \
        "gct-nvml-inventory (gpu-container-toolkit) 9.8.7\n"
    # built stripped, still a launcher: the shim never takes it for the low-level runtime
    assert executable.is_launcher(str(path / "nvidia-container-runtime"))
    return path


@pytest.mark.parametrize("first_line, message", [
    (None, "cannot read the interpreter's name from .gpu-container-toolkit-python beside the program"),
    ("#!python\n", "cannot read the interpreter's name from .gpu-container-toolkit-python beside the program"),
    ("#!/nonexistent/python3\n# the rest\n", "cannot execute /nonexistent/python3"),
])
def test_a_wheel_launcher_takes_its_interpreter_from_the_file_pip_rewrote(wheel_bindir, first_line, message):
    pointer = wheel_bindir / install_launchers.INTERPRETER_FILE
    pointer.unlink(missing_ok=True)
    if first_line is not None:
        pointer.write_text(first_line)
    done = subprocess.run([str(wheel_bindir / "nvidia-container-cli"), "--help"], capture_output=True, text=True,
                          env={}, timeout=30)
    assert done.returncode == 127 and done.stderr.startswith(f"nvidia-container-cli: error: {message}"), done.stderr
    assert done.stderr.count("\n") == 1
    # nvidia-cdi-hook needs no interpreter at all
    done = subprocess.run([str(wheel_bindir / "nvidia-cdi-hook"), "--version"], capture_output=True, text=True,
                          env={}, timeout=30)
    assert (done.returncode, done.stdout) == (0, "nvidia-cdi-hook (gpu-container-toolkit) 9.8.7\n")


def test_an_over_long_interpreter_path_is_one_bounded_line(wheel_bindir):
    """The interpreter's path comes from a file beside the program: the line that says it cannot be run
    cuts it as the Python programs cut a long path (cdi.errors.printable), with a control character in
    it escaped."""
    interpreter = "/" + "d" * 3000 + "\x07/python3"
    pointer = wheel_bindir / install_launchers.INTERPRETER_FILE
    pointer.write_text(f"#!{interpreter}\n")
    try:
        done = subprocess.run([str(wheel_bindir / "nvidia-container-cli"), "--help"], capture_output=True,
                              text=True, env={}, timeout=30)
    finally:
        pointer.unlink()
    assert done.returncode == 127
    expected = printable(f"cannot execute {interpreter} (File name too long)")
    assert done.stderr == f"nvidia-container-cli: error: {expected}\n"
    assert len(done.stderr) < 400 and "d...d" in expected and expected.endswith("d\\x07/python3 (File name too long)")


def test_nvidia_ctk_sees_the_path_it_was_run_by_and_looks_beside_it(bindir, tmp_path):
    """As a console script did: /usr/bin/nvidia-ctk (a symlink into the package's environment) finds
    /usr/bin/nvidia-container-runtime, not the one in the environment."""
    links = tmp_path / "usr-bin"
    links.mkdir()
    (links / "nvidia-ctk").symlink_to(bindir / "nvidia-ctk")
    (links / "nvidia-container-runtime").symlink_to(bindir / "nvidia-container-runtime")
    done = subprocess.run([str(links / "nvidia-ctk"), "runtime", "configure", "--config",
                           str(tmp_path / "daemon.json"), "--dry-run"], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin"}, timeout=60)
    assert f'"path": "{links}/nvidia-container-runtime"' in done.stdout, done.stdout + done.stderr


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="hiding /proc needs root and unshare")
def test_without_proc_the_launcher_goes_by_the_path_it_was_run_by(bindir):
    """A package's scriptlet under `rpm --root` runs nvidia-ctk chrooted, without /proc."""
    for program, args, expected in (("nvidia-ctk", ["--version"], "nvidia-ctk (gpu-container-toolkit) "),
                                    ("nvidia-container-cli", ["--help"], "usage: nvidia-container-cli")):
        done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                               'umount -n -l /proc && exec "$@"', "sh", str(bindir / program), *args],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and done.stdout.startswith(expected), done.stderr


def test_a_package_that_is_not_there_is_one_line(wheel_bindir):
    """The wheel's launcher pointed at this venv's interpreter, whose site-packages do not hold the project
    (an editable install: only a .pth file names the checkout, and -S reads none)."""
    probe = subprocess.run([sys.executable, "-I", "-S", "-c", f"import sys\n{install_launchers.WHEEL_SYS_PATH}\n"
                            "import hook"], capture_output=True, cwd="/")
    if probe.returncode == 0:
        pytest.skip("the project is installed into this interpreter's site-packages")
    (wheel_bindir / install_launchers.INTERPRETER_FILE).write_text(f"#!{sys.executable}\n")
    done = subprocess.run([str(wheel_bindir / "nvidia-container-cli"), "--help"], capture_output=True, text=True,
                          env={}, timeout=30)
    assert done.returncode == 1
    assert done.stderr == (f"nvidia-container-cli: error: cannot start: No module named 'hook' (is "
                           f"gpu-container-toolkit installed for {sys.executable}?)\n")


@pytest.mark.skipif(os.geteuid() != 0, reason="running the launcher as another uid needs root")
def test_an_interpreter_the_user_cannot_reach_says_what_to_fix(wheel_bindir):
    """Issue 27.12: unprivileged LXC runs nvidia-container-cli as the container's root, a mapped host uid;
    an interpreter in a folder only root may enter (a venv on a Python under /root) cannot be executed.
    The line names the uid and what to install where, not only 'Permission denied'."""
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="gct-launcher-uid-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        shutil.copy2(wheel_bindir / "nvidia-container-cli", base / "nvidia-container-cli")
        private = base / "private"
        private.mkdir(mode=0o700)
        (private / "python3").symlink_to(sys.executable)
        (base / install_launchers.INTERPRETER_FILE).write_text(f"#!{private}/python3\n")
        done = subprocess.run([str(base / "nvidia-container-cli"), "--help"], capture_output=True, text=True,
                              env={}, timeout=30, user=100000, group=100000)
    finally:
        shutil.rmtree(base)
    assert done.returncode == 127
    assert done.stderr == (
        "nvidia-container-cli: error: cannot execute the interpreter as host uid 100000: Permission denied; this "
        "program runs as that user here (an unprivileged container's root, a rootless engine): install "
        "gpu-container-toolkit where every user can read and run it, as the packages do (not in a venv under "
        f"/root) ({private}/python3)\n")

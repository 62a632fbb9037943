"""The static launcher: a hostile caller's environment must not reach the Python program it starts."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from libcontainer_c import install_launchers

PROBE = "gct-launcher-probe"


@pytest.fixture(scope="module")
def bindir(tmp_path_factory):
    path = tmp_path_factory.mktemp("bin")
    names = install_launchers.install(path, sys.executable)
    assert PROBE in names
    return path


def run_probe(bindir, env, args=(), argv0=None, program=None):
    exe = str(program or bindir / PROBE)
    result = subprocess.run([argv0 or exe, *args], executable=exe, env=env, capture_output=True,
                            text=True, stdin=subprocess.DEVNULL, timeout=30)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


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
    preload_src = tmp_path / "preload.c"
    preload_src.write_text(
        '#include <stdio.h>\n__attribute__((constructor)) static void pwn(void)'
        f'{{ FILE *f = fopen("{marker}", "w"); if (f) {{ fputs("preload", f); fclose(f); }} }}\n')
    preload = tmp_path / "preload.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(preload), str(preload_src)], check=True)
    # the preload library works when honoured: prove the test can fail
    subprocess.run(["/bin/true"], env={"LD_PRELOAD": str(preload)}, check=True)
    assert marker.read_text() == "preload"
    marker.unlink()

    env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(preload), "PYTHONPATH": str(evil),
           "PYTHONHOME": str(evil), "PYTHONSTARTUP": str(evil / "startup.py"), "PYTHONINSPECT": "1",
           "PYTHONUSERBASE": str(evil), "PYTHONSAFEPATH": "", "PYTHONNOUSERSITE": ""}
    seen = run_probe(bindir, env)
    assert not marker.exists()
    assert str(evil) not in seen["path"]
    assert not any(k.startswith(("PYTHON", "LD_")) for k in seen["env"])


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


def test_program_table_in_c_matches_the_installer():
    source = Path(install_launchers.LAUNCHER_SOURCE).read_text()
    table = dict(re.findall(r'\{"([^"]+)", "([^":]+):[^"]+", NULL\}', source))
    native = re.findall(r'\{"([^"]+)", NULL, \w+\}', source)
    assert native == ["nvidia-cdi-hook"]
    assert {**table, **dict.fromkeys(native)} == install_launchers.PROGRAMS


def test_nvidia_cdi_hook_runs_without_python(tmp_path):
    """nvidia-cdi-hook is C inside the launcher: a launcher whose interpreter does not exist runs it
    all the same (while a Python program from the same build cannot start)."""
    names = install_launchers.install(tmp_path, "/nonexistent/python3")
    assert "nvidia-cdi-hook" in names
    done = subprocess.run([str(tmp_path / "nvidia-cdi-hook"), "--help"], capture_output=True, text=True, env={},
                          stdin=subprocess.DEVNULL, timeout=30)
    assert done.returncode == 0 and "create-symlinks  --link TARGET::LINK" in done.stdout, done.stderr
    done = subprocess.run([str(tmp_path / "nvidia-cdi-hook"), "chmod"], capture_output=True, text=True, env={},
                          stdin=subprocess.DEVNULL, timeout=30)
    assert (done.returncode, done.stderr) == (0, "nvidia-cdi-hook: warning: ignoring unknown subcommand 'chmod'\n")
    probe = subprocess.run([str(tmp_path / PROBE)], capture_output=True, text=True, env={}, timeout=30)
    assert probe.returncode == 127 and "cannot execute /nonexistent/python3" in probe.stderr


def test_c_string_escapes_everything_unusual():
    assert install_launchers.c_string('a"b\\c?\n\u00e9') == '"a\\"b\\\\c\\?\\012\\303\\251"'

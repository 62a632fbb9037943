"""`nvidia-ctk hook ...` (issue 14, item 9): NVIDIA's older specs run their createContainer hooks as
`nvidia-ctk hook create-symlinks ...`. The installed nvidia-ctk (a copy of the launcher) runs that as
nvidia-cdi-hook, the C program, before any interpreter: an image's environment, which runc hands to a
hook without `env`, reaches no Python. `python -m ctk.main hook` hands over to nvidia-cdi-hook too."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher import install_launchers

REPO = Path(__file__).resolve().parents[3]
CTK = Path(sys.executable).parent / "nvidia-ctk"
needs_ctk = pytest.mark.skipif(not CTK.exists(), reason="needs the installed launchers (make venv)")


def bundle_with_rootfs(tmp_path: Path) -> tuple[dict, Path]:
    bundle, rootfs = tmp_path / "bundle", tmp_path / "bundle" / "rootfs"
    rootfs.mkdir(parents=True)
    (bundle / "config.json").write_text(json.dumps({"ociVersion": "1.0.2", "root": {"path": "rootfs"}}))
    return {"ociVersion": "1.0.2", "id": "c", "pid": 1, "bundle": str(bundle)}, rootfs


def run(program, args, state, cwd="/", env=None):
    return subprocess.run([str(program), *args], input=json.dumps(state), capture_output=True, text=True,
                          cwd=cwd, env=env if env is not None else {"PATH": "/usr/bin:/bin"}, timeout=60)


@needs_ctk
def test_nvidia_ctk_hook_create_symlinks_as_in_nvidias_specs(tmp_path):
    state, rootfs = bundle_with_rootfs(tmp_path)
    done = run(CTK, ["hook", "create-symlinks", "--link", "libcuda.so.1::/usr/lib/libcuda.so"], state)
    assert (done.returncode, done.stderr) == (0, "")
    assert os.readlink(rootfs / "usr/lib/libcuda.so") == "libcuda.so.1"


@needs_ctk
def test_nvidia_ctk_hook_help_and_unknown_subcommands_are_nvidia_cdi_hooks():
    done = subprocess.run([str(CTK), "hook", "--help"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and "create-symlinks  --link TARGET::LINK" in done.stdout
    done = subprocess.run([str(CTK), "hook", "chmod", "--mode", "755", "--path", "/dev/dri"], capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=30)
    assert (done.returncode, done.stderr) == (0, "nvidia-cdi-hook: warning: ignoring unknown subcommand 'chmod'\n")


def test_the_hook_starts_no_interpreter_and_ignores_the_images_environment(tmp_path):
    """A launcher whose interpreter does not exist still runs `nvidia-ctk hook`; with cwd in the rootfs
    and the image's PYTHONPATH/LD_PRELOAD pointing into it, nothing of the image runs."""
    bindir = tmp_path / "bin"
    install_launchers.install(bindir, "/nonexistent/python3")
    state, rootfs = bundle_with_rootfs(tmp_path)
    marker = tmp_path / "pwned"
    (rootfs / "evil").mkdir()
    for name in ("sitecustomize.py", "ctk.py"):
        (rootfs / "evil" / name).write_text(f"open({str(marker)!r}, 'w').write('python')\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": "evil", "PYTHONHOME": "evil", "LD_PRELOAD": "evil/x.so"}
    done = run(bindir / "nvidia-ctk", ["hook", "create-symlinks", "--link", "t::/made"], state, cwd=rootfs, env=env)
    assert (done.returncode, done.stderr) == (0, "")
    assert os.readlink(rootfs / "made") == "t" and not marker.exists()
    # every other command is Python's
    other = subprocess.run([str(bindir / "nvidia-ctk"), "--version"], capture_output=True, text=True, timeout=30)
    assert other.returncode == 127 and "cannot execute /nonexistent/python3" in other.stderr


@needs_ctk
def test_run_as_a_module_it_hands_over_to_the_nvidia_cdi_hook_beside_it(tmp_path):
    state, rootfs = bundle_with_rootfs(tmp_path)
    done = subprocess.run([sys.executable, "-m", "ctk.main", "hook", "create-symlinks", "--link", "t::/made"],
                          input=json.dumps(state), capture_output=True, text=True, cwd=REPO, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
    assert os.readlink(rootfs / "made") == "t"


@pytest.mark.parametrize("flags", [["--debug"], ["-d"], ["--quiet"], ["-q"], ["--debug", "-q"]])
def test_global_flags_before_hook_still_start_no_interpreter(tmp_path, flags):
    """`nvidia-ctk --debug hook ...` (NVIDIA's nvidia-ctk takes global flags before its command) is the
    hook too: it took the admin CLI's way, Python with the caller's environment, which for a hook
    without `env` is the image's (LD_PRELOAD for the interpreter's loader, cwd in the rootfs)."""
    bindir = tmp_path / "bin"
    install_launchers.install(bindir, "/nonexistent/python3")   # Python, if started, fails loudly
    state, rootfs = bundle_with_rootfs(tmp_path)
    env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": "evil/x.so", "PYTHONPATH": "evil"}
    done = run(bindir / "nvidia-ctk", [*flags, "hook", "create-symlinks", "--link", "t::/made"], state, cwd=rootfs,
               env=env)
    assert (done.returncode, done.stderr) == (0, "")
    assert os.readlink(rootfs / "made") == "t"
    # a command before `hook`, or help before it, is still the CLI's (every other spelling of global options
    # before `hook` is the hook: tests/unit/test_launcher.py)
    for args in (["cdi", "hook"], ["--help", "hook"], ["--config", "x", "cdi", "hook"]):
        other = subprocess.run([str(bindir / "nvidia-ctk"), *args], capture_output=True, text=True, timeout=30)
        assert other.returncode == 127 and "cannot execute /nonexistent/python3" in other.stderr

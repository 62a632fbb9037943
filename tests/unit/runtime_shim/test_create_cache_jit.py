"""jit-cdi mode through the create cache: the launcher (launcher/create_fastpath.c) reads NVML again
with gct-nvml-inventory and applies the edits Python built, when the transcript and every answer of the
driver root are what they were (runtime_shim/create_cache.py, runtime_shim/jit_cdi.py).

The launcher's config.json is held to Python's for the same request on a simulated host; a changed
NVML answer, a changed file of the driver root, a helper that fails, a request with graphics, and a
warning each send the create back to Python."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cdi.config_cache import RECENT_NS
from tests.unit.runtime_shim.shim_env import bindir, make_bundle, make_shim_env, minimal_spec  # noqa: F401
from tests.unit.runtime_shim.test_create_cache import FROM_CACHE, cache_files, create

HELPER = "gct-nvml-inventory"


def simulated_host(path: Path, *options: str) -> Path:
    """A simulated host old enough for its answers to be kept."""
    ctk = Path(sys.executable).parent / "nvidia-ctk"
    subprocess.run([str(ctk), "simulate", "create", *options, str(path)], check=True, capture_output=True)
    time.sleep(RECENT_NS / 1e9 + 0.1)   # answers that changed less than RECENT_NS ago are not kept
    return path


@pytest.fixture(scope="module")
def gpu_host(tmp_path_factory) -> Path:
    """2 GPUs, the second in MIG mode; shared by the tests that change nothing in it."""
    return simulated_host(tmp_path_factory.mktemp("host") / "gpu-host", "--gpus", "2", "--mig", "1=3g.20gb,1g.5gb")


def shim_on(tmp_path: Path, bindir: Path, host: Path):  # noqa: F811
    env = make_shim_env(tmp_path, bindir)
    env.host = host
    env.write_config(f'mode = "jit-cdi"\n[nvidia-container-cli]\nroot = "{host}"\n')
    return env


@pytest.fixture
def shim(tmp_path, bindir, gpu_host):  # noqa: F811
    return shim_on(tmp_path, bindir, gpu_host)


@pytest.fixture
def own_shim(tmp_path, bindir):  # noqa: F811
    """A shim on a host of its own (1 GPU), for a test that changes the host."""
    return shim_on(tmp_path, bindir, simulated_host(tmp_path / "own-host", "--gpus", "1"))


def python_then_launcher(shim, tmp_path, spec, env=None):
    for path in cache_files(shim):
        path.unlink()
    shim.reset()
    python_doc = create(shim, make_bundle(tmp_path / "py", spec), env=env)
    assert shim.python_ran()
    assert len(cache_files(shim)) == 1, shim.debug_log.read_text()
    shim.reset()
    launcher_doc = create(shim, make_bundle(tmp_path / "c", spec), env=env)
    assert not shim.python_ran() and FROM_CACHE in shim.debug_log.read_text()
    return python_doc, launcher_doc


def entry_text(shim) -> str:
    [path] = cache_files(shim)
    return path.read_text()


def rewrite_entry(shim, change) -> None:
    """The entry with change(text) applied, written in place (still ours: same owner and mode)."""
    [path] = cache_files(shim)
    text = path.read_text()
    changed = change(text)
    assert changed != text
    with open(path, "r+") as f:
        f.write(changed)
        f.truncate()


@pytest.mark.parametrize("devices, capabilities", [
    ("0", None), ("1:0", None), ("all", "compute,utility"), ("0,1:1", "utility"), ("1", "compute,video"),
])
def test_the_launcher_edits_as_python_does(shim, tmp_path, devices, capabilities):
    env = [f"NVIDIA_VISIBLE_DEVICES={devices}"]
    if capabilities:
        env.append(f"NVIDIA_DRIVER_CAPABILITIES={capabilities}")
    spec = minimal_spec(env, hooks={"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook",
                                                  "args": ["nvidia-container-runtime-hook", "prestart"],
                                                  "env": ["PATH=/usr/bin"]}]})
    python_doc, launcher_doc = python_then_launcher(shim, tmp_path, spec)
    assert launcher_doc == python_doc
    assert any(d["path"].startswith("/dev/nvidia") for d in launcher_doc["linux"]["devices"])
    assert "prestart" not in launcher_doc["hooks"]
    text = entry_text(shim)
    assert "mode jit-cdi\n" in text and f"nvml-helper {shim.bindir.parent / 'libexec' / HELPER}\n" in text
    assert "inventory device-count 2\n" in text and "\nlstat " in text


def test_the_entry_is_read_with_the_transcript_the_helper_prints(shim, tmp_path):
    python_then_launcher(shim, tmp_path, minimal_spec(["NVIDIA_VISIBLE_DEVICES=0"]))
    lines = entry_text(shim).splitlines()
    value = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in lines if line.startswith("nvml-")}
    printed = subprocess.run([value["nvml-helper"], value["nvml-library"], value["nvml-mig-minors"],
                              value["nvml-timeout"]], env={}, capture_output=True, text=True, check=True).stdout
    assert printed == "".join(line.removeprefix("inventory ") + "\n" for line in lines if line.startswith("inventory "))


def cached(shim, tmp_path, devices="0"):
    spec = minimal_spec([f"NVIDIA_VISIBLE_DEVICES={devices}"])
    _, doc = python_then_launcher(shim, tmp_path, spec)
    return spec, doc


def python_decides(shim, tmp_path, spec, name="again") -> bool:
    shim.reset()
    create(shim, make_bundle(tmp_path / name, spec))
    return shim.python_ran()


def test_another_nvml_answer_goes_to_python(shim, tmp_path):
    """The transcript is compared line for line: an entry recorded from another GPU (a UUID of its
    inventory lines differs from what the driver says now) is not used, and Python writes it anew."""
    spec, doc = cached(shim, tmp_path)
    rewrite_entry(shim, lambda text: text.replace("inventory gpu 0 uuid GPU-", "inventory gpu 0 uuid GPU-0"))
    assert python_decides(shim, tmp_path, spec)
    assert not python_decides(shim, tmp_path, spec, "third")


@pytest.mark.parametrize("change", ["line-missing", "line-added"])
def test_a_transcript_of_another_length_goes_to_python(shim, tmp_path, change):
    spec, _ = cached(shim, tmp_path)
    if change == "line-missing":
        rewrite_entry(shim, lambda text: text.replace("inventory device-count 2\n", ""))
    else:
        rewrite_entry(shim, lambda text: text.replace("inventory device-count 2\n",
                                                      "inventory device-count 2\ninventory device-count 2\n"))
    assert python_decides(shim, tmp_path, spec)


def test_a_failing_helper_goes_to_python(shim, tmp_path):
    spec, _ = cached(shim, tmp_path)
    rewrite_entry(shim, lambda text: text.replace("nvml-library ", "nvml-library /nonexistent/"))
    assert python_decides(shim, tmp_path, spec)


def test_a_changed_file_of_the_driver_root_goes_to_python(own_shim, tmp_path):
    spec, _ = cached(own_shim, tmp_path)
    firmware = next(Path(own_shim.host, "lib/firmware/nvidia").rglob("*.bin"))
    assert f" {firmware}\n" in entry_text(own_shim)
    os.utime(firmware)   # a new ctime: the answer of one lstat differs
    assert python_decides(own_shim, tmp_path, spec)


def test_a_file_appearing_in_the_driver_root_goes_to_python(own_shim, tmp_path):
    """A path the search found missing (an absent answer) that now exists: Python searches again."""
    spec, _ = cached(own_shim, tmp_path)
    absent = [line.split(" ", 1)[1] for line in entry_text(own_shim).splitlines() if line.startswith("lstat-absent ")]
    target = next(p for p in absent if os.path.isdir(os.path.dirname(p)))
    Path(target).write_text("")
    assert python_decides(own_shim, tmp_path, spec)


@pytest.mark.parametrize("kind", ["lstat", "lstat-dir"])
def test_a_recorded_answer_that_differs_goes_to_python(shim, tmp_path, kind):
    """The launcher compares every number of an answer (here the inode, which nothing else checks)."""
    spec, _ = cached(shim, tmp_path)

    def other_inode(text: str) -> str:
        line = next(x for x in text.splitlines() if x.startswith(kind + " "))
        fields = line.split(" ")
        fields[3] = str(int(fields[3]) + 1)
        return text.replace(line + "\n", " ".join(fields) + "\n")

    rewrite_entry(shim, other_inode)
    assert python_decides(shim, tmp_path, spec)


def test_a_timeout_in_the_environment_is_part_of_the_key(shim, tmp_path):
    spec, _ = cached(shim, tmp_path)
    shim.reset()
    create(shim, make_bundle(tmp_path / "t", spec), env=shim.env(NVIDIA_CTK_NVML_TIMEOUT="5"))
    assert shim.python_ran()
    assert "nvml-timeout 5.000000\n" in max(cache_files(shim), key=lambda p: p.stat().st_mtime_ns).read_text()


def test_the_mps_pipe_directory_of_the_environment_is_mounted_and_part_of_the_key(own_shim, tmp_path):
    """jit-cdi mounts $CUDA_MPS_PIPE_DIRECTORY of the shim's environment (it reaches Python through the
    launcher), and an entry made under one directory is not applied under another (issue 22, item 9)."""
    (own_shim.host / "srv" / "mps").mkdir(parents=True)
    spec = minimal_spec(["NVIDIA_VISIBLE_DEVICES=0"])
    mps = {"destination": "/srv/mps", "source": str(own_shim.host / "srv" / "mps"),
           "options": ["nosuid", "nodev", "noexec", "bind", "rprivate"]}
    env = own_shim.env(CUDA_MPS_PIPE_DIRECTORY="/srv/mps")
    python_doc, launcher_doc = python_then_launcher(own_shim, tmp_path, spec, env=env)
    assert mps in python_doc["mounts"] and launcher_doc == python_doc
    own_shim.reset()
    default = create(own_shim, make_bundle(tmp_path / "default", spec))
    assert own_shim.python_ran() and not [m for m in default["mounts"] if m["destination"] == "/srv/mps"]


def test_graphics_is_not_kept(shim, tmp_path):
    bundle = make_bundle(tmp_path / "g", minimal_spec(["NVIDIA_VISIBLE_DEVICES=0",
                                                      "NVIDIA_DRIVER_CAPABILITIES=graphics,utility"]))
    create(shim, bundle)
    assert cache_files(shim) == []


def test_a_warning_means_no_entry(own_shim, tmp_path):
    """A missing nvidia-uvm node is only a warning in jit-cdi mode: seen at every create, so not kept."""
    os.unlink(own_shim.host / "dev" / "nvidia-uvm")
    create(own_shim, make_bundle(tmp_path / "w", minimal_spec(["NVIDIA_VISIBLE_DEVICES=0"])))
    assert "nvidia-uvm is missing" in own_shim.debug_log.read_text()
    assert cache_files(own_shim) == []


@pytest.mark.parametrize("program", [HELPER, "nvidia-cdi-hook"])
def test_without_the_helper_or_the_hook_python_decides_every_time(shim, tmp_path, bindir, program):  # noqa: F811
    """An installation without gct-nvml-inventory (in its libexec/) or nvidia-cdi-hook beside the launcher
    (removed by hand) keeps no jit-cdi entry: without the hook there, the edits name one looked for elsewhere."""
    installed = (bindir.parent / "libexec" if program == HELPER else bindir) / program
    hidden = installed.parent / f".{program}.hidden"
    os.rename(installed, hidden)
    try:
        create(shim, make_bundle(tmp_path / "n", minimal_spec(["NVIDIA_VISIBLE_DEVICES=0"])))
        assert cache_files(shim) == []
    finally:
        os.rename(hidden, installed)


def test_the_key_holds_the_nvml_timeout():
    from runtime_shim.create_cache import key_lines
    from runtime_shim.runtime_cache import KEY_ENVIRON

    assert "NVIDIA_CTK_NVML_TIMEOUT" in KEY_ENVIRON
    view = {"process": {"env": [], "capabilities": {"bounding": []}}, "annotations": {}, "mounts": []}
    lines = key_lines(view, {}, "p", "/x", {"NVIDIA_CTK_NVML_TIMEOUT": "3"})
    assert "environ NVIDIA_CTK_NVML_TIMEOUT=3" in lines

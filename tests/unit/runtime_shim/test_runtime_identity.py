"""The low-level runtime is checked before config.json is edited (issue 16.10), and is never one of our own
launchers, however it is reached (issue 16.1: a `runc` that was a copy of the launcher re-exec'd the shim
3,261 times in 5 s). Through the real launcher with a fake runtime; the launcher's C test
(launcher_identity.c) and Python's (runtime_shim.executable) are held to the same files."""
from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys

import pytest

from cdi.nvml import NVML_INVENTORY_PROGRAM
from launcher import install_launchers
from runtime_shim import executable, runtime_cache
from tests.unit.runtime_shim.shim_env import (  # noqa: F401  (bindir: a module fixture)
    bindir, make_bundle, make_shim_env, minimal_spec)


@pytest.fixture
def shim(tmp_path, bindir):
    env = make_shim_env(tmp_path, bindir)
    env.write_config('mode = "legacy"\n[nvidia-container-runtime-hook]\npath = "/bin/true"\n')
    return env


def gpu_bundle(path):
    return make_bundle(path, minimal_spec(["NVIDIA_VISIBLE_DEVICES=0"]))


def create(shim, bundle, env=None):
    return shim.run("create", "--bundle", str(bundle), "ctr", env=env)


def one_error_line(result) -> str:
    assert result.returncode == 1, result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("nvidia-container-runtime: error: ")
    return result.stderr


# --- the launcher itself, reached every way it can be -------------------------------------------------

def _symlink(src, dst):
    dst.symlink_to(src)


def _hard_link(src, dst):
    os.link(src, dst)


def _copy(src, dst):
    shutil.copy2(src, dst)


WAYS = {"symlink to the shim": ("nvidia-container-runtime", _symlink),
        "symlink to .cdi": ("nvidia-container-runtime.cdi", _symlink),
        "hard link to the shim": ("nvidia-container-runtime", _hard_link),
        "copy of .legacy": ("nvidia-container-runtime.legacy", _copy),
        "copy of the prestart hook": ("nvidia-container-runtime-hook", _copy)}


@pytest.mark.parametrize("way", WAYS)
def test_runc_in_path_that_is_our_launcher_is_refused_in_one_line(shim, tmp_path, way):
    program, make = WAYS[way]
    path_dir = tmp_path / "path-bin"
    make(shim.bindir / program, path_dir / "runc")
    shim.write_config(runtimes=["runc"])
    bundle = gpu_bundle(tmp_path / "b")
    before = (bundle / "config.json").read_bytes()
    result = subprocess.run([str(shim.shim), "create", "--bundle", str(bundle), "ctr"], env=shim.env(),
                            capture_output=True, text=True, timeout=30)  # looped for ever before
    line = one_error_line(result)
    assert f"'{path_dir / 'runc'}': it is a launcher of this toolkit" in line
    assert (bundle / "config.json").read_bytes() == before
    # passthrough commands too: neither the launcher (from a cache) nor Python execs it
    for _ in range(2):
        result = subprocess.run([str(shim.shim), "state", "ctr"], env=shim.env(), capture_output=True, text=True,
                                timeout=30)
        assert "it is a launcher of this toolkit" in one_error_line(result)


def test_a_launcher_in_path_is_skipped_for_a_real_runtime_after_it(shim, tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    shutil.copy2(shim.bindir / "nvidia-container-runtime.cdi", first / "runc")
    (second / "runc").symlink_to(shim.runtime)
    shim.write_config('mode = "legacy"\n[nvidia-container-runtime-hook]\npath = "/bin/true"\n', runtimes=["runc"])
    bundle = gpu_bundle(tmp_path / "b")
    env = shim.env(PATH=f"{first}:{second}")
    assert create(shim, bundle, env=env).returncode == 0
    assert shim.calls()[0]["argv"][0] == str(second / "runc")


def test_an_explicit_path_to_a_launcher_is_refused(shim, tmp_path):
    shim.write_config(runtimes=[str(shim.bindir / "nvidia-container-runtime.legacy")])
    bundle = gpu_bundle(tmp_path / "b")
    before = (bundle / "config.json").read_bytes()
    assert "it is a launcher of this toolkit" in one_error_line(create(shim, bundle))
    assert (bundle / "config.json").read_bytes() == before


def test_a_cached_runtime_replaced_in_place_by_a_launcher_is_not_execed(shim, tmp_path):
    """The launcher's own check: the cache names a runtime that has become a launcher since (rewritten in
    place, so its directory's mtime did not move and the cache still matches)."""
    assert shim.run("state", "warm-up").returncode == 0
    shim.reset()
    assert shim.run("state", "cached").returncode == 0
    assert not shim.python_ran()  # the cache serves
    shim.reset()
    dir_mtime = os.stat(shim.runtime.parent).st_mtime_ns
    with open(shim.runtime, "r+b") as out:  # same inode, same directory entry
        out.truncate(0)
        out.write((shim.bindir / "nvidia-container-runtime").read_bytes())
    assert os.stat(shim.runtime.parent).st_mtime_ns == dir_mtime
    result = subprocess.run([str(shim.shim), "state", "x"], env=shim.env(), capture_output=True, text=True,
                            timeout=30)
    assert "it is a launcher of this toolkit" in one_error_line(result)
    assert "passthrough of 'state'" not in shim.debug_log.read_text()


# --- a runtime that leads back to the shim: refused on re-entry --------------------------------------

WRAPPER = '#!/bin/sh\necho "$$" >> {count}\nexec {shim} "$@"\n'
REENTRY = "GCT_RUNTIME_STARTED_BY_SHIM"


def wrapper_runtime(shim, tmp_path):
    """A `runtimes` entry that is a shell script exec'ing the shim (no launcher: no ELF note to find);
    each start appends a line to the returned count file."""
    count, wrapper = tmp_path / "wrapper-starts", tmp_path / "runc-wrapper.sh"
    wrapper.write_text(WRAPPER.format(count=count, shim=shim.shim))
    wrapper.chmod(0o755)
    shim.write_config('mode = "legacy"\n[nvidia-container-runtime-hook]\npath = "/bin/true"\n',
                      runtimes=[str(wrapper)])
    return wrapper, count


def run_bounded(shim, count, *args):
    """The shim's run, bounded: it exec'd the wrapper and itself for ever before the fix (one process)."""
    try:
        return subprocess.run([str(shim.shim), *args], env=shim.env(), capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail(f"looped: {len(count.read_text().splitlines())} starts of the wrapper in 20 s")


def test_a_runtimes_wrapper_that_runs_the_shim_again_is_refused_in_one_line(shim, tmp_path):
    """Through the Python path: a GPU container's create, and the first call, which writes the cache."""
    wrapper, count = wrapper_runtime(shim, tmp_path)
    for args in (["create", "--bundle", str(gpu_bundle(tmp_path / "b")), "ctr"], ["state", "ctr"]):
        count.unlink(missing_ok=True)
        line = one_error_line(run_bounded(shim, count, *args))
        assert "started again by the low-level runtime it ran, a loop" in line and line.endswith(f" ({wrapper})\n")
        assert len(count.read_text().splitlines()) == 1


def test_a_runtimes_wrapper_reached_from_the_launchers_passthrough_is_refused_too(shim, tmp_path):
    wrapper, count = wrapper_runtime(shim, tmp_path)
    run_bounded(shim, count, "state", "warm-up")   # Python writes the cache (and refuses the re-entry)
    count.unlink()
    shim.reset()
    line = one_error_line(run_bounded(shim, count, "state", "ctr"))
    assert "started again by the low-level runtime it ran, a loop" in line and line.endswith(f" ({wrapper})\n")
    assert len(count.read_text().splitlines()) == 1
    log = shim.debug_log.read_text()
    assert log.index(f"passthrough of 'state' to {wrapper}") < log.index("started again")   # C exec'd it first


def test_the_runtime_gets_the_marker_and_other_programs_ignore_it(shim, tmp_path):
    """The low-level runtime (and whatever it starts: hooks without env inherit runc's environment) sees
    the variable; only the shim refuses it. Nesting through other programs keeps working."""
    shim.write_config(runtimes=[str(shim.runtime)])
    assert shim.run("state", "ctr").returncode == 0   # Python's exec
    assert shim.run("state", "ctr").returncode == 0   # the launcher's
    assert [call["env"][REENTRY] for call in shim.calls()] == [str(shim.runtime)] * 2
    env = shim.env(**{REENTRY: str(shim.runtime)})
    for program, args in (("nvidia-ctk", ["--version"]), ("nvidia-cdi-hook", ["--version"]),
                          ("nvidia-container-runtime-hook", ["--version"]), ("nvidia-container-cli", ["--version"])):
        done = shim.run(*args, program=program, env=env)
        assert done.returncode == 0 and "started again" not in done.stderr, (program, done.stderr)


# --- runtimes that cannot be started: refused before config.json is touched ---------------------------

def _write(path, data: bytes, mode=0o755):
    path.write_bytes(data)
    path.chmod(mode)


def _elf_with_missing_loader(path):
    """/bin/true's bytes with its PT_INTERP path pointing nowhere (same length: only a letter changes)."""
    data = bytearray(open("/bin/true", "rb").read())
    at = data.find(b"/lib64/ld-linux")
    if at < 0:
        at = data.find(b"/lib/ld-linux")
    assert at > 0, "/bin/true is not dynamically linked here"
    data[at + 1:at + 4] = b"zzz"
    _write(path, bytes(data))


UNSTARTABLE = {
    "no x bit": (lambda p: _write(p, b"#!/bin/sh\n", 0o644), "not executable"),
    "neither ELF nor #!": (lambda p: _write(p, b"just text\n"), "neither an ELF executable nor a #! script"),
    "#! interpreter missing": (lambda p: _write(p, b"#!/nonexistent/sh -e\n"),
                               "its interpreter '/nonexistent/sh' is unusable: no such file or directory"),
    "#! interpreter is the shim": (None, "is unusable: it is a launcher of this toolkit"),
    "ELF loader missing": (_elf_with_missing_loader, "its loader '/zzz"),
    "a directory": (lambda p: p.mkdir(), "not a regular file"),
    "a dangling symlink": (lambda p: p.symlink_to(p.parent / "nowhere"), "no such file or directory"),
    "an ELF object file": (None, "neither an ELF executable nor a #! script"),
}


@pytest.mark.parametrize("kind", UNSTARTABLE)
def test_a_runtime_that_cannot_be_started_fails_before_config_json_is_edited(shim, tmp_path, kind):
    make, expected = UNSTARTABLE[kind]
    runtime = tmp_path / "broken-runtime"
    if kind == "#! interpreter is the shim":
        _write(runtime, f"#!{shim.shim}\n".encode())
    elif kind == "an ELF object file":
        (tmp_path / "o.c").write_text("int x;\n")
        subprocess.run(["cc", "-c", "-o", str(runtime), str(tmp_path / "o.c")], check=True)
        runtime.chmod(0o755)
    else:
        make(runtime)
    shim.write_config('mode = "legacy"\n[nvidia-container-runtime-hook]\npath = "/bin/true"\n',
                      runtimes=[str(runtime)])
    bundle = gpu_bundle(tmp_path / "b")
    before = (bundle / "config.json").read_bytes()
    line = one_error_line(create(shim, bundle))
    assert line.startswith(f"nvidia-container-runtime: error: no low-level runtime found (tried {runtime}; "
                           f"'{runtime}': "), line
    assert expected in line, line
    assert (bundle / "config.json").read_bytes() == before
    assert sorted(p.name for p in bundle.iterdir()) == ["config.json"]
    # and the next usable entry is taken instead
    shim.write_config('mode = "legacy"\n[nvidia-container-runtime-hook]\npath = "/bin/true"\n',
                      runtimes=[str(runtime), str(shim.runtime)])
    assert create(shim, bundle).returncode == 0
    assert shim.calls()[0]["argv"][0] == str(shim.runtime)


# --- one identity, read the same way in C and in Python ------------------------------------------------

def test_every_installed_program_and_its_stripped_copy_is_a_launcher(bindir, tmp_path):
    names = [p.name for p in bindir.iterdir() if not p.name.startswith(".")]
    assert sorted(names) == sorted(install_launchers.PROGRAMS)
    for name in install_launchers.PROGRAMS:
        assert executable.is_launcher(str(bindir / name)), name
    # the NVML reader, in the installation's libexec/, is a program of its own, not a launcher
    assert not executable.is_launcher(str(bindir.parent / "libexec" / NVML_INVENTORY_PROGRAM))
    stripped = tmp_path / "stripped"
    shutil.copy2(bindir / "nvidia-container-runtime", stripped)
    subprocess.run(["strip", "--strip-unneeded", str(stripped)], check=True)  # as the packages do
    assert executable.is_launcher(str(stripped))
    for other in ("/bin/true", sys.executable, shutil.which("runc") or "/bin/sh", "/etc/hostname", "/nonexistent"):
        assert not executable.is_launcher(other), other


def _crafted_files(source: bytes, out_dir):
    """Launcher bytes with the ELF header, program headers and notes damaged (fixed seed), truncated
    copies, and ELF32/big-endian variants of the header: the two readers must agree on each."""
    rng = random.Random(1601)
    note_at = source.find(executable.LAUNCHER_NOTE)
    assert note_at > 0
    files = []
    for n in (0, 3, 63, 64, 200, note_at, note_at + 20, note_at + len(executable.LAUNCHER_NOTE)):
        files.append(source[:n])
    for _ in range(36):
        data = bytearray(source[:note_at + 4096])
        for _ in range(rng.randint(1, 4)):
            where = rng.choice([rng.randrange(0, 64), rng.randrange(64, note_at),
                                rng.randrange(note_at, note_at + len(executable.LAUNCHER_NOTE))])
            data[where] = rng.randrange(256)
        files.append(bytes(data))
    for cls, order in ((1, 1), (2, 2)):
        data = bytearray(source[:note_at + 4096])
        data[4], data[5] = cls, order
        files.append(bytes(data))
    for offset, value in ((16, 1),            # e_type ET_REL: the note still decides
                          (54, 0xFF), (55, 0xFF),  # e_phentsize inflated: nothing large is read
                          (56, 0xFF), (57, 0xFF)):  # e_phnum past the limit
        data = bytearray(source[:note_at + 4096])
        data[offset] = value
        files.append(bytes(data))
    paths = []
    for i, data in enumerate(files):
        path = out_dir / f"crafted-{i}"
        _write(path, data)
        paths.append(path)
    return paths


def test_c_and_python_agree_on_crafted_files(shim, tmp_path):
    crafted = _crafted_files((shim.bindir / "nvidia-container-runtime").read_bytes(), tmp_path)
    verdicts = {}
    environ = shim.env()
    identity = runtime_cache.config_identity(str(shim.config))
    for path in crafted:
        python_says = executable.is_launcher(str(path))
        # a cache naming the crafted file: the launcher logs the passthrough just before its exec,
        # unless it finds the note
        runtime_cache.write_cache(environ, identity, str(path), str(shim.debug_log), ["NVIDIA_VISIBLE_DEVICES"])
        shim.reset()
        result = subprocess.run([str(shim.shim), "state", "x"], env=environ, capture_output=True, text=True,
                                timeout=30)
        c_execs = shim.debug_log.exists() and f"passthrough of 'state' to {path}" in shim.debug_log.read_text()
        # once exec'd, a damaged ELF may well crash: the launcher itself must not
        assert c_execs or result.returncode >= 0, f"the launcher crashed on {path}"
        assert c_execs != python_says, path
        verdicts[python_says] = verdicts.get(python_says, 0) + 1
    assert verdicts.get(True, 0) >= 5 and verdicts.get(False, 0) >= 5, verdicts  # both outcomes exercised

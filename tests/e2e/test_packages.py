"""The packages (issue 9): `packaging/build_packages.py` builds a wheel, a .deb and an .rpm once per
module; then
- the wheel installs into a fresh venv on Debian's python3 and its programs run (the C sources the
  launcher and the simulator compile are in it);
- the .deb and .rpm hold the expected files with sane modes, metadata, conffiles and scripts, and no
  path of the build machine; the systemd units pass `systemd-analyze verify`;
- the .deb installs with apt into a fresh Debian root (mmdebstrap minbase, nothing else), its
  programs run there, post-install writes the CDI spec when a driver is present and says so when
  not, removal leaves only the conffiles, purge leaves nothing;
- installed on this machine inside a private mount namespace (overlays over /usr, /etc and /var, an
  empty /run of its own, so the host is not changed and its /run does not matter), and with only what
  it installed, a private dockerd gives `docker run --runtime=nvidia -e NVIDIA_VISIBLE_DEVICES=1` and
  `docker run --gpus 1` their GPU of a simulated host; removing the package leaves nothing but the
  conffiles, and neither removal nor purge takes what it did not make: a /run/cdi that was there
  before stays with its other spec, one it made goes.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import pytest

from cdi.nvml import NVML_INVENTORY_PROGRAM
from tests.e2e.engines import (Daemon, _spawn, _wait_for, busybox_image_tar, daemon_tmpdir, docker,
                               dockerd_private_args, stop_daemon, unique_cgroup_parent)
from tests.support.pkgtools import PACKAGING, REPO, load_pkgtools

pytestmark = pytest.mark.e2e

load_pkgtools()
from pkgtools import checks  # noqa: E402

SYSTEM_PYTHON = "/usr/bin/python3"
PREFIX = "/usr/lib/gpu-container-toolkit"
PROGRAMS = ("nvidia-container-runtime", "nvidia-container-runtime.cdi", "nvidia-container-runtime.legacy",
            "nvidia-container-runtime-hook", "nvidia-cdi-hook", "nvidia-container-cli", "nvidia-ctk", "nvidia-device-plugin")
NVML_READER = NVML_INVENTORY_PROGRAM   # an internal helper in the environment's libexec/, off PATH
DEVICE_PLUGIN_CONFIG = "/etc/nvidia-device-plugin/config.yaml"
DEVICE_PLUGIN_UNIT = "nvidia-device-plugin.service"   # shipped, never enabled by the package
CONFFILES_DEB = ("/etc/nvidia-container-runtime/config.toml", "/etc/default/nvidia-cdi-refresh", DEVICE_PLUGIN_CONFIG)
CONFFILES_RPM = ("/etc/nvidia-container-runtime/config.toml", "/etc/sysconfig/nvidia-cdi-refresh", DEVICE_PLUGIN_CONFIG)
# pip's cache for the package builds of this machine's test runs (wheels built by Debian's python only)
PIP_CACHE = Path(tempfile.gettempdir()) / "gct-packages-pip-cache"
CLEAN_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def sh(argv: list[str], timeout: float = 300, check: bool = True, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(argv[:6])} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done


def _need_root_and(*programs: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("building and installing packages needs root")
    missing = [p for p in programs if not shutil.which(p)]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)}")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Build the wheel, .deb and .rpm once: {"wheel", "deb", "rpm", "work": the kept work dir}."""
    _need_root_and("gcc", "dpkg-deb", "rpmbuild", "unshare", "objdump")
    if not os.path.exists(SYSTEM_PYTHON):
        pytest.skip("Debian's python3 is not installed")
    base = tmp_path_factory.mktemp("packages")
    out, work = base / "out", base / "work"
    done = sh([SYSTEM_PYTHON, str(PACKAGING / "build_packages.py"), "--out", str(out), "--work", str(work),
               "--pip-cache", str(PIP_CACHE)], timeout=600)
    assert "built" in done.stdout, done.stdout
    found = {"wheel": list(out.glob("*.whl")), "deb": list(out.glob("*.deb")), "rpm": list(out.glob("*.rpm"))}
    assert all(len(v) == 1 for v in found.values()), found
    yield {**{k: v[0] for k, v in found.items()}, "work": work}
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def deb_tree(built, tmp_path_factory):
    root = tmp_path_factory.mktemp("deb-tree")
    sh(["dpkg-deb", "-x", str(built["deb"]), str(root)])
    return root


def leak_needles(built) -> list[str]:
    return [str(built["work"]), str(REPO), str(PIP_CACHE), "/.pyenv/"]


# --- the default config (no build needed) ---------------------------------------------------------

def test_default_config_lists_every_key_commented_with_its_default():
    from cdi.config import Config, parse_config
    from cdi.record import MISSING, fields, is_record, replace

    text = (PACKAGING / "config" / "config.toml").read_text()
    # as shipped: every key commented, so the file means the built-in defaults
    assert replace(parse_config(text, "shipped"), source=None) == Config()
    assert not re.search(r"(?m)^[a-z]", text.replace("[", "#")), "a key is not commented out"
    # uncommented: every line parses, and each value is the default
    uncommented = re.sub(r"(?m)^#([a-z0-9-]+ = )", r"\1", text)
    assert replace(parse_config(uncommented, "uncommented"), source=None) == Config()

    # every key the configuration knows is in the file
    def keys(cls, prefix=""):
        for f in fields(cls):
            name = f.metadata.get("toml")
            if not name or name == "features":
                continue
            default = f.default if f.default_factory is MISSING else f.default_factory()
            if is_record(default):
                yield from keys(type(default), f"{prefix}{name}.")
            else:
                yield prefix, name

    from cdi.config import FEATURES
    tables = re.findall(r"(?m)^\[([^\]]+)\]$", text)
    for prefix, name in keys(Config):
        section = prefix.rstrip(".")
        if section:
            assert section in tables or section.rsplit(".", 1)[0] in tables, section
        assert re.search(rf"(?m)^#{re.escape(name)} = ", text), f"{prefix}{name} missing"
    for feature in FEATURES:
        assert f"#{feature} = false" in text


# --- the wheel ------------------------------------------------------------------------------------

def test_wheel_installs_into_a_fresh_venv_and_its_programs_run(built, tmp_path):
    with zipfile.ZipFile(built["wheel"]) as wheel:
        names = "\n".join(wheel.namelist())
    for member in ("launcher/launcher.c", "launcher/runtime_passthrough.c", "simulator/csrc/nvml_sim.c",
                   "simulator/csrc/nvml_api.h", "cdi/schema.json"):
        assert member in names, member
    assert re.search(r"libcontainer_c/_native\.[\w.-]*so", names), "the compiled cffi module is not in the wheel"

    venv = tmp_path / "venv"
    sh([SYSTEM_PYTHON, "-m", "venv", str(venv)])
    env = {"PATH": CLEAN_PATH, "HOME": os.environ.get("HOME", "/root"), "PIP_CACHE_DIR": str(PIP_CACHE),
           **{k: v for k, v in os.environ.items() if k.startswith("PIP_") and k != "PIP_CACHE_DIR"}}
    sh([str(venv / "bin/python"), "-m", "pip", "install", "--quiet", str(built["wheel"])], env=env)
    version = sh([str(venv / "bin/nvidia-ctk"), "--version"], env=env)
    assert "0.1.0" in version.stdout
    # the NVML helper, the wheel's data, in the venv's libexec/ (off PATH), where the programs find it
    assert "gct-nvml-inventory (gpu-container-toolkit) 0.1.0" in sh([str(venv / "libexec" / NVML_READER), "--version"]).stdout
    assert not (venv / "bin" / NVML_READER).exists()
    installed = sh([str(venv / "bin/python"), "-m", "launcher.install_launchers", str(venv / "bin")], cwd="/")
    assert "nvidia-cdi-hook" in installed.stdout
    # a launcher-started program, from the wheel's installation (not the checkout)
    probe = sh([str(venv / "bin/gct-launcher-probe")], env={"PATH": CLEAN_PATH})
    assert str(venv) in probe.stdout and str(REPO) not in probe.stdout
    # the simulator compiles its C sources from the installed wheel
    host = tmp_path / "host"
    sh([str(venv / "bin/nvidia-ctk"), "simulate", "create", "--gpus", "1", str(host)], env=env, cwd="/")
    info = sh([str(venv / "bin/nvidia-ctk"), "info", "--driver-root", str(host), "--format", "json"], env=env)
    assert "550.54.15" in info.stdout


# --- reproducible builds --------------------------------------------------------------------------

def test_a_second_build_elsewhere_later_gives_the_same_bytes(built, tmp_path):
    """The same sources built again from another directory, at another time, with another work dir:
    the wheel, the .deb and the .rpm are byte for byte the same (issue 14, item 18). Before, the C
    helper's Build ID hashed the temp source dir (debug info, stripped only afterwards), and so did
    the wheel's RECORD and every package holding it."""
    elsewhere = tmp_path / "another" / "checkout"
    elsewhere.mkdir(parents=True)
    for name in sh(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
                   ).stdout.split("\0"):
        source = REPO / name
        if name and (source.is_file() or source.is_symlink()):
            (elsewhere / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, elsewhere / name, follow_symlinks=False)
    out = tmp_path / "out"
    sh([SYSTEM_PYTHON, str(elsewhere / "packaging/build_packages.py"), "--out", str(out), "--work",
        str(tmp_path / "w"), "--pip-cache", str(PIP_CACHE)], timeout=600)
    for kind in ("wheel", "deb", "rpm"):
        again = out / built[kind].name
        assert again.read_bytes() == built[kind].read_bytes(), f"the {kind} differs"


# --- the .deb and .rpm contents -------------------------------------------------------------------

def _deb_field(built, name: str) -> str:
    return sh(["dpkg-deb", "-f", str(built["deb"]), name]).stdout.strip()


def test_deb_metadata_conffiles_and_scripts(built, tmp_path):
    assert _deb_field(built, "Package") == "gpu-container-toolkit"
    assert _deb_field(built, "Version") == "0.1.0-1"
    assert _deb_field(built, "Architecture") == "amd64"
    depends = [d.strip() for d in _deb_field(built, "Depends").split(",")]
    assert "runc | crun" in depends
    assert any(re.fullmatch(r"python3\.\d+", d) for d in depends), depends
    assert any(d.startswith("libgcc-s1 ") for d in depends), depends  # rpds-py links libgcc_s.so.1
    assert not any(d.startswith("libcap2") for d in depends), depends  # no python-prctl any more
    assert any(d.startswith("libc6 (>= ") for d in depends), depends
    assert "nvidia-container-toolkit" in _deb_field(built, "Conflicts")
    assert _deb_field(built, "Description").startswith("run containers with NVIDIA GPUs")
    control = tmp_path / "control"
    sh(["dpkg-deb", "-e", str(built["deb"]), str(control)])
    assert (control / "conffiles").read_text().split() == list(CONFFILES_DEB)
    for script in ("postinst", "prerm", "postrm"):
        path = control / script
        assert path.stat().st_mode & 0o777 == 0o755, script
        sh(["sh", "-n", str(path)])
    # md5sums cover every regular file of the payload
    listed = {line.split("  ", 1)[1] for line in (control / "md5sums").read_text().splitlines()}
    assert f"{PREFIX[1:]}/bin/nvidia-container-runtime" in listed
    assert "etc/nvidia-container-runtime/config.toml" in listed


def test_deb_payload_files_modes_and_no_build_paths(built, deb_tree):
    assert not os.path.lexists(deb_tree / "usr/bin" / NVML_READER)
    for program in PROGRAMS:
        link = deb_tree / "usr/bin" / program
        assert link.is_symlink(), program
        assert os.path.normpath(link.parent / os.readlink(link)) == str(deb_tree) + f"{PREFIX}/bin/{program}"
    for name in ("nvidia-container-runtime", "nvidia-container-runtime-hook", "nvidia-container-cli", "nvidia-cdi-hook",
                 "nvidia-ctk"):
        data = (deb_tree / PREFIX[1:] / "bin" / name).read_bytes()
        assert data[:4] == b"\x7fELF"
        # the baked paths are the installed ones
        assert f"{PREFIX}/bin/python".encode() in data
        assert f"{PREFIX}/lib/python3.".encode() in data
    launchers = {(deb_tree / PREFIX[1:] / "bin" / p).stat().st_ino for p in PROGRAMS}
    assert len(launchers) == 1, "the launchers are hard links of one binary"
    assert not (deb_tree / PREFIX[1:] / "bin" / NVML_READER).exists()
    reader = deb_tree / PREFIX[1:] / "libexec" / NVML_READER
    assert reader.stat().st_ino not in launchers and "INTERP" in sh(["readelf", "-l", str(reader)]).stdout
    assert reader.stat().st_mode & 0o777 == 0o755
    assert not (deb_tree / PREFIX[1:] / "bin/gct-launcher-probe").exists()
    assert not (deb_tree / PREFIX[1:] / "bin/pip").exists()
    assert not (deb_tree / PREFIX[1:] / "bin/.gpu-container-toolkit-python").exists()   # the wheel's, pruned
    pyvenv = (deb_tree / PREFIX[1:] / "pyvenv.cfg").read_text()
    assert "home = /usr/bin" in pyvenv and f"-m venv {PREFIX}" in pyvenv
    assert os.readlink(deb_tree / PREFIX[1:] / "bin/python3") == "python3.11" or \
        os.readlink(deb_tree / PREFIX[1:] / "bin/python3").startswith("python3.")
    assert not list(deb_tree.rglob("__pycache__")), "bytecode is compiled at install time, not shipped"
    for path in ("lib/systemd/system/nvidia-cdi-refresh.service", "lib/systemd/system/nvidia-cdi-refresh.path",
                 f"lib/systemd/system/{DEVICE_PLUGIN_UNIT}", "usr/share/doc/gpu-container-toolkit/device-plugin.md",
                 "lib/udev/rules.d/71-nvidia-cdi-refresh.rules", "usr/share/doc/gpu-container-toolkit/copyright",
                 "usr/share/doc/gpu-container-toolkit/changelog.Debian.gz", *(c[1:] for c in CONFFILES_DEB)):
        assert (deb_tree / path).is_file(), path
    changelog = gzip.decompress((deb_tree / "usr/share/doc/gpu-container-toolkit/changelog.Debian.gz").read_bytes())
    assert changelog.decode().startswith("gpu-container-toolkit (0.1.0-1) ")
    assert checks.all_problems(deb_tree, leak_needles(built)) == []
    assert_manuals_and_completion(deb_tree, "usr/share/zsh/vendor-completions")
    # nothing refers to the placeholders of the templates
    for path in deb_tree.rglob("*"):
        if path.is_file() and path.suffix not in (".so", ".gz") and path.stat().st_size < 200_000:
            assert "@PREFIX@" not in path.read_text(errors="replace"), path


def assert_manuals_and_completion(tree: Path, zsh_dir: str) -> None:
    """A manual page for every program in /usr/bin (the runtime's two mode names share its page), made
    from the installed program's --help; nvidia-ctk's completion for bash, zsh and fish; README."""
    man = tree / "usr/share/man/man1"
    aliases = ("nvidia-container-runtime.cdi", "nvidia-container-runtime.legacy")
    for program in (p for p in PROGRAMS if p not in aliases):
        page = man / f"{program}.1.gz"
        assert page.is_file(), program
        text = gzip.decompress(page.read_bytes()).decode()
        assert text.startswith(f'.TH "{program.upper()}" "1" ') and '"gpu-container-toolkit 0.1.0"' in text, program
    for alias in aliases:
        assert os.readlink(man / f"{alias}.1.gz") == "nvidia-container-runtime.1.gz"
    ctk = gzip.decompress((man / "nvidia-ctk.1.gz").read_bytes()).decode()
    for command in ("nvidia\\-ctk cdi generate", "nvidia\\-ctk runtime configure"):
        assert f'.SS "{command}"' in ctk, command
    assert "\\-\\-device\\-name\\-strategy" in ctk
    assert "_nvidia_ctk_completion" in (tree / "usr/share/bash-completion/completions/nvidia-ctk").read_text()
    assert (tree / zsh_dir / "_nvidia-ctk").read_text().startswith("#compdef nvidia-ctk")
    assert "complete --no-files --command nvidia-ctk" in (
        tree / "usr/share/fish/vendor_completions.d/nvidia-ctk.fish").read_text()
    readme = (tree / "usr/share/doc/gpu-container-toolkit/README.md").read_text()
    assert readme == (REPO / "README.md").read_text()


def test_lintian_finds_no_errors(built, tmp_path):
    """lintian's verdict, with the overrides the package ships for what is deliberate (static
    launchers, the bundled PyYAML's libyaml, the environment's interpreter). Left as a warning: a first
    upload that closes no Debian bug."""
    _need_root_and("lintian")
    # TMPDIR: lintian leaves a /tmp/mldbm-elf-* database behind on every run
    done = sh(["lintian", "--tag-display-limit", "0", str(built["deb"])], check=False, timeout=120,
              env={**os.environ, "TMPDIR": str(tmp_path)})
    tags = [line for line in done.stdout.splitlines() if re.match(r"^[EWIXCPOM]: ", line)]
    errors = [t for t in tags if t.startswith("E: ")]
    # every program in /usr/bin has its page (the internal NVML helper is in the environment's libexec/)
    warnings = {t.split()[2] for t in tags if t.startswith("W: ")}
    assert errors == [], errors
    assert warnings <= {"initial-upload-closes-no-bugs"}, warnings


def test_the_checks_catch_what_they_look_for(tmp_path):
    """The sanity checks the build and the tests rely on report a leak, a bad mode and a bad link."""
    tree = tmp_path / "tree"
    (tree / "usr/bin").mkdir(parents=True)
    (tree / "usr/bin/tool").write_text(f"#!/bin/sh\n# built in {tmp_path}\n")
    os.chmod(tree / "usr/bin/tool", 0o775)
    os.symlink("/etc/passwd", tree / "usr/bin/escape")
    problems = checks.all_problems(tree, [str(tmp_path)])
    assert any("contains" in p for p in problems)
    assert any("0775" in p for p in problems)
    assert any("absolute symlink" in p for p in problems)


def symbol_versions_needed(tree: Path) -> set[tuple[str, str]]:
    """(soname, version) of every versioned symbol the ELF files of tree take from outside it."""
    inside = {p.name for p in tree.rglob("*.so*")}
    needed = set()
    for path in tree.rglob("*"):
        if path.is_symlink() or not path.is_file() or path.open("rb").read(4) != b"\x7fELF":
            continue
        soname = None
        for line in sh(["objdump", "-p", str(path)]).stdout.split("Version References:")[-1].splitlines():
            if m := re.match(r"\s+required from (\S+):", line):
                soname = m[1]
            elif (m := re.match(r"\s+0x\w+ 0x\w+ \d+ (\S+)$", line)) and soname not in inside:
                needed.add((soname, m[1]))
    return needed


def test_rpm_lists_the_expected_files_and_metadata(built, deb_tree):
    rpm = str(built["rpm"])
    files = sh(["rpm", "-qlp", rpm]).stdout.split()
    for program in PROGRAMS:
        assert f"/usr/bin/{program}" in files and f"{PREFIX}/bin/{program}" in files, program
    assert f"{PREFIX}/libexec/{NVML_READER}" in files
    assert not [f for f in files if f.endswith(f"/{NVML_READER}") and f != f"{PREFIX}/libexec/{NVML_READER}"]
    for path in (*CONFFILES_RPM, "/usr/lib/systemd/system/nvidia-cdi-refresh.service",
                 f"/usr/lib/systemd/system/{DEVICE_PLUGIN_UNIT}",
                 "/usr/lib/systemd/system/nvidia-cdi-refresh.path", "/usr/lib/udev/rules.d/71-nvidia-cdi-refresh.rules",
                 f"{PREFIX}/libexec/nvidia-cdi-refresh", f"{PREFIX}/pyvenv.cfg",
                 f"{PREFIX}/lib/python3.11/site-packages/libcontainer_c/_native.abi3.so"):
        assert path in files, path
    assert not any("__pycache__" in f for f in files)
    for path in (*(f"/usr/share/man/man1/{p}.1.gz" for p in PROGRAMS), "/usr/share/zsh/site-functions/_nvidia-ctk",
                 "/usr/share/bash-completion/completions/nvidia-ctk", "/usr/share/fish/vendor_completions.d/nvidia-ctk.fish",
                 "/usr/share/doc/gpu-container-toolkit/README.md"):
        assert path in files, path
    assert not any(f.startswith(("/usr/share/zsh/vendor-completions", "/usr/share/man/man1/gct-")) for f in files)
    assert sorted(sh(["rpm", "-qcp", rpm]).stdout.split()) == sorted(CONFFILES_RPM)
    requires = sh(["rpm", "-qpR", rpm]).stdout.splitlines()
    assert "(runc or crun)" in requires and "/usr/bin/python3.11" in requires
    assert "libgcc_s.so.1()(64bit)" in requires and "libcap.so.2()(64bit)" not in requires
    # every symbol version the ELF files need from a library outside the package (objdump's reading,
    # not rpm's), e.g. GLIBC_2.36 of the C helper: an older glibc must refuse the package
    needed = symbol_versions_needed(deb_tree)
    assert any(soname == "libc.so.6" for soname, _ in needed), needed
    missing = [f"{s}({v})(64bit)" for s, v in sorted(needed) if f"{s}({v})(64bit)" not in requires]
    assert missing == [], missing
    info = sh(["rpm", "-qp", "--queryformat", "%{NAME} %{VERSION} %{RELEASE} %{LICENSE} %{BUILDHOST}\\n", rpm])
    assert info.stdout.split() == ["gpu-container-toolkit", "0.1.0", "1", "Apache-2.0", "localhost"]
    assert "First release" in sh(["rpm", "-qp", "--changelog", rpm]).stdout
    scripts = sh(["rpm", "-qp", "--scripts", rpm]).stdout
    assert "gct-package-setup configure" in scripts and "gct-package-setup unconfigure" in scripts
    for needle in leak_needles(built):
        assert needle not in scripts
    dump = sh(["rpm", "-qp", "--dump", rpm]).stdout.splitlines()
    modes = {line.split()[0]: line.split()[4] for line in dump}
    assert modes[f"{PREFIX}/bin/nvidia-container-runtime"] == "0100755"
    assert modes["/etc/nvidia-container-runtime/config.toml"] == "0100644"


def test_systemd_units_verify_and_the_udev_rule_is_well_formed(deb_tree, tmp_path):
    _need_root_and("systemd-analyze")
    root = tmp_path / "root"
    shutil.copytree(deb_tree, root, symlinks=True)
    # the units they order against (sysinit.target, ...) come from the systemd installed here
    shutil.copytree("/usr/lib/systemd/system", root / "usr/lib/systemd/system", symlinks=True, dirs_exist_ok=True)
    units = ["lib/systemd/system/nvidia-cdi-refresh.service", "lib/systemd/system/nvidia-cdi-refresh.path",
             f"lib/systemd/system/{DEVICE_PLUGIN_UNIT}"]
    done = sh(["systemd-analyze", "verify", f"--root={root}", *units], check=False, cwd=root)
    assert done.returncode == 0 and done.stderr.strip() == "", done.stderr
    # the same check fails for a unit whose program is missing (so it can fail)
    (root / "lib/systemd/system/nvidia-cdi-refresh.service").write_text(
        (root / units[0]).read_text().replace("libexec/nvidia-cdi-refresh", "libexec/missing"))
    assert sh(["systemd-analyze", "verify", f"--root={root}", units[0]], check=False, cwd=root).returncode != 0

    service = (deb_tree / units[0]).read_text()
    assert "EnvironmentFile=-/etc/default/nvidia-cdi-refresh" in service
    assert f"ExecStart={PREFIX}/libexec/nvidia-cdi-refresh" in service
    assert "PathChanged=/lib/modules/%v/modules.dep" in (deb_tree / units[1]).read_text()
    plugin = (deb_tree / units[2]).read_text()
    assert f"ExecStart={PREFIX}/bin/nvidia-device-plugin --config-file={DEVICE_PLUGIN_CONFIG}" in plugin
    rule_lines = [line for line in (deb_tree / "lib/udev/rules.d/71-nvidia-cdi-refresh.rules").read_text().splitlines()
                  if line.strip() and not line.startswith("#")]
    assert rule_lines
    token = re.compile(r'^[A-Z_]+(\{[A-Za-z_]+\})?(==|!=|\+=|=)"[^"]*"$')
    for line in rule_lines:
        parts = [p.strip() for p in line.split(", ")]
        assert all(token.match(p) for p in parts), line
        assert 'SYSTEMD_WANTS}+="nvidia-cdi-refresh.service"' in line or "start nvidia-cdi-refresh.service" in line
    assert any('SUBSYSTEM=="module"' in l and 'KERNEL=="nvidia"' in l and 'ACTION=="add"' in l for l in rule_lines)


# --- a fresh Debian root --------------------------------------------------------------------------

@pytest.fixture(scope="session")
def bookworm_base(tmp_path_factory):
    """A minbase bookworm tarball (mmdebstrap with this host's apt sources), made once per session."""
    _need_root_and("mmdebstrap", "unshare", "chroot")
    tar = tmp_path_factory.mktemp("bookworm") / "minbase.tar"
    done = sh(["mmdebstrap", "--variant=minbase", "--quiet", "--skip=cleanup/apt/lists", "bookworm", str(tar)],
              check=False, timeout=600)
    if done.returncode != 0:
        pytest.skip(f"mmdebstrap could not make a Debian root here: {done.stderr.strip().splitlines()[-1:]}")
    return tar


class Chroot:
    """A Debian root in a temp dir; commands run chrooted in a private mount namespace with /proc and
    /dev, so nothing is mounted on the host once they end."""

    def __init__(self, root: Path):
        self.root = root

    def run(self, script: str, env: dict[str, str] | None = None, check: bool = True,
            timeout: float = 300) -> subprocess.CompletedProcess:
        wrapper = ('set -e; r="$1"; shift; mount -n -t proc proc "$r/proc"; mount -n --rbind /dev "$r/dev"; '
                   'exec chroot "$r" /bin/sh -c "$@"')
        base_env = {"PATH": CLEAN_PATH, "LANG": "C.UTF-8", "DEBIAN_FRONTEND": "noninteractive", "HOME": "/root"}
        return sh(["unshare", "--mount", "--propagation", "private", "sh", "-c", wrapper, "sh", str(self.root),
                   script], env={**base_env, **(env or {})}, check=check, timeout=timeout)

    def files(self) -> dict[str, str]:
        """path -> kind of everything in the root but the package manager's own records and caches."""
        skip = ("/proc/", "/dev/", "/tmp/", "/var/lib/dpkg/", "/var/lib/apt/", "/var/cache/", "/var/log/",
                "/srv/")
        found = {}
        for dirpath, dirnames, filenames in os.walk(self.root):
            for name in dirnames + filenames:
                path = Path(dirpath, name)
                rel = "/" + str(path.relative_to(self.root))
                if rel.startswith(skip) or rel + "/" in skip:
                    continue
                found[rel] = "link" if path.is_symlink() else "dir" if path.is_dir() else "file"
        return found


WANTS = "etc/systemd/system/multi-user.target.wants"
UNITS = ("nvidia-cdi-refresh.path", "nvidia-cdi-refresh.service")
PODMAN_HOOK = "/usr/share/containers/oci/hooks.d/oci-nvidia-hook.json"


def docker_undo_suffix() -> str:
    from runtime_shim.engine_config.docker import UNDO_SUFFIX
    return UNDO_SUFFIX


# NVIDIA's packages as they relate to each other (and the programs each ships), for the swap both ways
NVIDIA_PACKAGES = {
    "nvidia-container-toolkit-base": ("1.17.8-1", "", ("nvidia-ctk", "nvidia-container-runtime", "nvidia-cdi-hook")),
    "libnvidia-container-tools": ("1.17.8-1", "", ("nvidia-container-cli",)),
    "nvidia-container-toolkit": ("1.17.8-1", "nvidia-container-toolkit-base (= 1.17.8-1), libnvidia-container-tools "
                                 "(>= 1.17.8-1)", ("nvidia-container-runtime-hook",)),
    # meta packages that only depend on the toolkit
    "nvidia-container-runtime": ("3.14.0-1", "nvidia-container-toolkit (>= 1.14.0-1)", ()),
    "nvidia-docker2": ("2.14.0-1", "nvidia-container-toolkit (>= 1.14.0-1)", ()),
    # a package of someone else's that uses nvidia-container-cli
    "gpu-inventory-tool": ("1.0-1", "libnvidia-container-tools (>= 1.10.0)", ()),
}
SWAP_BACK = re.search(r"`(apt install nvidia-container-toolkit [^`]+)`", (REPO / "docs/packaging.md").read_text())


def stand_in_debs(dest: Path) -> dict[str, Path]:
    """Packages named, versioned and related like NVIDIA's, shipping stand-ins of their programs."""
    debs = {}
    for name, (version, depends, programs) in NVIDIA_PACKAGES.items():
        tree = dest / name
        (tree / "DEBIAN").mkdir(parents=True)
        control = f"Package: {name}\nVersion: {version}\nArchitecture: amd64\nMaintainer: test <t@t.invalid>\n"
        control += f"Depends: {depends}\n" if depends else ""
        (tree / "DEBIAN/control").write_text(control + "Description: stand-in of NVIDIA's package\n")
        for program in programs:
            (tree / "usr/bin").mkdir(parents=True, exist_ok=True)
            (tree / "usr/bin" / program).write_text(f"#!/bin/sh\necho NVIDIA {program}\n")
            (tree / "usr/bin" / program).chmod(0o755)
        debs[name] = dest / f"{name}_{version}_amd64.deb"
        sh(["dpkg-deb", "--root-owner-group", "--build", str(tree), str(debs[name])])
    return debs


def apt_repository(debs: dict[str, Path], dest: Path) -> None:
    """dest/Packages for the debs (in dest): a flat repository apt reads as `deb [trusted=yes] file:DIR ./`."""
    entries = []
    for deb in debs.values():
        control = sh(["dpkg-deb", "-f", str(deb)]).stdout.rstrip("\n")
        data = deb.read_bytes()
        entries.append(f"{control}\nFilename: ./{deb.name}\nSize: {len(data)}\n"
                       f"SHA256: {hashlib.sha256(data).hexdigest()}\n")
    (dest / "Packages").write_text("\n".join(entries))


def test_deb_in_a_fresh_debian_root_install_run_remove_purge(built, bookworm_base, tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    sh(["tar", "-C", str(root), "-xf", str(bookworm_base)])
    shutil.copy2("/etc/resolv.conf", root / "etc/resolv.conf")
    deb = root / "tmp" / built["deb"].name
    shutil.copy2(built["deb"], deb)
    box = Chroot(root)
    (repo := root / "srv/nvidia-repo").mkdir(parents=True)
    stand_ins = stand_in_debs(repo)
    apt_repository(stand_ins, repo)
    (root / "etc/apt/sources.list.d/nvidia-stand-ins.list").write_text("deb [trusted=yes] file:/srv/nvidia-repo ./\n")
    box.run("apt-get update -q", timeout=600)
    nvidia = {name: f"/srv/nvidia-repo/{path.name}" for name, path in stand_ins.items()}

    def installed_packages() -> set[str]:
        listed = box.run("dpkg-query -W -f='${Package} ${db:Status-Abbrev}\\n'").stdout.splitlines()
        return {line.split()[0] for line in listed if line.split()[1:] == ["ii"]}

    # 0. NVIDIA's toolkit with nvidia-docker2 and the nvidia-container-runtime meta package on top
    box.run(f"dpkg -i {' '.join(nvidia.values())}")
    # 1. apt resolves exactly what the package declares; it takes the place of NVIDIA's toolkit (the
    # versioned Provides keep what depends on it); without a driver, post-install says so
    installed = box.run(f"apt-get install -y -q --no-install-recommends /tmp/{deb.name}", timeout=600)
    packages = installed_packages()
    assert {"gpu-container-toolkit", "nvidia-docker2", "nvidia-container-runtime", "gpu-inventory-tool"} <= packages, \
        installed.stdout
    assert not packages & {"nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools"}
    assert "no NVIDIA driver found; no CDI spec written (/var/run/cdi/nvidia.yaml)" in installed.stdout
    assert not (root / "run/cdi/nvidia.yaml").exists()
    # no systemd here, yet the units are enabled, for the day it comes (deb-systemd-helper)
    assert not (root / "bin/systemctl").exists()
    assert (root / WANTS / "nvidia-cdi-refresh.path").is_symlink()
    # the programs run with only what the package and its dependencies installed
    assert "0.1.0" in box.run("nvidia-ctk --version").stdout
    assert box.run("nvidia-container-cli --version").returncode == 0
    assert box.run(f"{PREFIX}/libexec/{NVML_READER} --version").stdout == f"{NVML_READER} (gpu-container-toolkit) 0.1.0\n"
    assert list((root / PREFIX[1:]).rglob("__pycache__")), "post-install compiles the bytecode"
    cdi_hook = box.run("nvidia-cdi-hook --help", check=False)
    assert "cannot execute" not in cdi_hook.stderr and "No module named" not in cdi_hook.stderr, cdi_hook.stderr
    box.run("nvidia-ctk runtime configure --runtime=docker")
    # ... and back, from NVIDIA's repository with docs/packaging.md's command: NVIDIA's packages take this
    # one's place; nvidia-docker2 and what depends on libnvidia-container-tools stay (apt removes the
    # latter when only nvidia-container-toolkit is named)
    assert SWAP_BACK, "docs/packaging.md names no swap back to NVIDIA's packages"
    swapped = box.run(SWAP_BACK[1].replace("apt install", "apt-get install -y -q --no-install-recommends"))
    packages = installed_packages()
    assert "gpu-container-toolkit" not in packages, swapped.stdout
    assert {"nvidia-container-toolkit", "nvidia-docker2", "nvidia-container-runtime", "gpu-inventory-tool"} <= packages, \
        swapped.stdout
    assert box.run("nvidia-ctk --version").stdout == "NVIDIA nvidia-ctk\n"
    # purging ours then keeps docker's runtime entry: NVIDIA's package serves its program now
    purged = box.run("dpkg --purge gpu-container-toolkit")
    assert "/usr/bin/nvidia-container-runtime is installed again" in purged.stderr, purged.stderr
    assert "nvidia" in json.loads((root / "etc/docker/daemon.json").read_text())["runtimes"]
    assert not os.path.lexists(root / ("etc/docker/daemon.json" + docker_undo_suffix()))
    box.run(f"dpkg --purge {' '.join(nvidia)}; rm -r /etc/docker")

    # 2. a host with systemd (units get enabled) and a driver: the simulated one, made with gcc outside
    box.run("apt-get install -y -q --no-install-recommends systemd", timeout=600)
    sim = root / "srv/sim"
    sh([str(Path(sys.executable).parent / "nvidia-ctk"), "simulate", "create", "--gpus", "2", str(sim)], cwd="/")
    daemon_json = root / "etc/docker/daemon.json"
    daemon_json.parent.mkdir(parents=True)
    original = '{\n  "log-level": "warn"\n}\n'
    daemon_json.write_text(original)
    (root / PODMAN_HOOK[1:]).parent.mkdir(parents=True)  # podman's package makes it
    before = box.files()
    installed = box.run(f"dpkg -i /tmp/{deb.name}", env={"NVIDIA_CTK_DRIVER_ROOT": "/srv/sim"})
    assert "wrote the CDI spec /var/run/cdi/nvidia.yaml" in installed.stdout, installed.stdout
    spec = (root / "run/cdi/nvidia.yaml").read_text()
    assert "nvidia.com/gpu" in spec and "name: \"1\"" in spec.replace("'", '"')
    hook_paths = set(re.findall(r"path: (\S*nvidia-cdi-hook)", spec))
    assert hook_paths and all((root / p.lstrip("/")).exists() for p in hook_paths), hook_paths
    assert (root / "etc/systemd/system/multi-user.target.wants/nvidia-cdi-refresh.path").is_symlink()
    listed = box.run("nvidia-ctk cdi list", env={"NVIDIA_CTK_DRIVER_ROOT": "/srv/sim"})
    assert "nvidia.com/gpu=1" in listed.stdout + listed.stderr
    # the refresh program: a driver gone removes the stale spec
    gone = box.run(f"{PREFIX}/libexec/nvidia-cdi-refresh")
    assert "no NVIDIA driver found; removed the CDI spec" in gone.stdout
    assert not (root / "run/cdi/nvidia.yaml").exists()
    box.run(f"{PREFIX}/libexec/nvidia-cdi-refresh", env={"NVIDIA_CTK_DRIVER_ROOT": "/srv/sim"})
    # an upgrade (the same version again) drops the old bytecode, compiles anew, keeps the units as
    # the admin left them: the one disabled stays disabled, the other enabled
    stray = root / PREFIX[1:] / "lib/python3.11/site-packages/cdi/__pycache__/stray.cpython-311.pyc"
    stray.write_bytes(b"")
    box.run("systemctl disable nvidia-cdi-refresh.path")
    box.run(f"dpkg -i /tmp/{deb.name}", env={"NVIDIA_CTK_DRIVER_ROOT": "/srv/sim"})
    assert not stray.exists() and list((root / PREFIX[1:]).rglob("__pycache__/*.pyc"))
    assert not os.path.lexists(root / WANTS / "nvidia-cdi-refresh.path")  # the link, not its target
    assert (root / WANTS / "nvidia-cdi-refresh.service").is_symlink()
    assert (root / "run/cdi/nvidia.yaml").is_file()
    box.run("systemctl enable nvidia-cdi-refresh.path")
    # the admin disables the refresh and puts a spec of their own there: an upgrade leaves both alone; with
    # the unit enabled again an upgrade still does not overwrite a spec the package did not write
    box.run("systemctl disable nvidia-cdi-refresh.service")
    own_spec = OTHER_SPEC.replace("vendor.com", "nvidia.com") + "\n"
    (root / "run/cdi/nvidia.yaml").write_text(own_spec)
    upgraded = box.run(f"dpkg -i /tmp/{deb.name}", env={"NVIDIA_CTK_DRIVER_ROOT": "/srv/sim"})
    assert "nvidia-cdi-refresh.service is disabled: the CDI spec was not regenerated" in upgraded.stdout, upgraded.stdout
    assert (root / "run/cdi/nvidia.yaml").read_text() == own_spec
    assert not os.path.lexists(root / WANTS / "nvidia-cdi-refresh.service")
    box.run("systemctl enable nvidia-cdi-refresh.service")
    upgraded = box.run(f"dpkg -i /tmp/{deb.name}", env={"NVIDIA_CTK_DRIVER_ROOT": "/srv/sim"})
    assert "left the CDI spec /var/run/cdi/nvidia.yaml: this package did not write it" in upgraded.stdout
    assert (root / "run/cdi/nvidia.yaml").read_text() == own_spec
    (root / "run/cdi/nvidia.yaml").unlink()
    box.run(f"{PREFIX}/libexec/nvidia-cdi-refresh", env={"NVIDIA_CTK_DRIVER_ROOT": "/srv/sim"})
    # the device plugin's unit is shipped, never enabled by the package; the admin enables it
    assert not os.path.lexists(root / WANTS / DEVICE_PLUGIN_UNIT)
    box.run(f"systemctl enable {DEVICE_PLUGIN_UNIT}")
    # the engines, configured by the admin with the package's tool
    box.run("nvidia-ctk runtime configure --runtime=docker --set-as-default")
    box.run("nvidia-ctk runtime configure --runtime=podman")
    assert json.loads(daemon_json.read_text())["default-runtime"] == "nvidia"
    assert (root / PODMAN_HOOK[1:]).is_file()
    # what a container start would leave at run time: runtime caches, bytecode written by root
    (root / "run/nvidia-container-toolkit").mkdir(parents=True, exist_ok=True)
    (root / "run/nvidia-container-toolkit/cdi-validated.json").write_text("{}")
    stray.write_bytes(b"")
    box.run("echo '# edited' >> /etc/nvidia-container-runtime/config.toml")

    # 3. remove: nothing of the package is left but its configuration: conffiles, the units'
    # enabled state, the engines' configuration (and what purge is to undo of it)
    box.run("dpkg -r gpu-container-toolkit")
    after = box.files()
    left = {p for p in after if p not in before}
    configuration = {*CONFFILES_DEB, "/etc/nvidia-container-runtime", "/etc/nvidia-device-plugin", PODMAN_HOOK,
                     "/etc/docker/daemon.json" + docker_undo_suffix(), f"/{WANTS}/nvidia-cdi-refresh.path",
                     f"/{WANTS}/nvidia-cdi-refresh.service", f"/{WANTS}/{DEVICE_PLUGIN_UNIT}"}
    assert configuration <= left, left
    assert {p for p in left - configuration
            if not p.startswith(("/var/lib/systemd/deb-systemd-helper-", "/var/lib/gpu-container-toolkit"))} == set(), left
    assert [p for p in before if p not in after] == []
    assert not (root / "run/cdi/nvidia.yaml").exists()
    assert not (root / "run/nvidia-container-toolkit").exists()
    assert "# edited" in (root / "etc/nvidia-container-runtime/config.toml").read_text()
    assert json.loads(daemon_json.read_text())["default-runtime"] == "nvidia"

    # 4. purge: nothing at all; daemon.json has its own bytes again
    purged = box.run("dpkg --purge gpu-container-toolkit")
    after = box.files()
    assert {p: k for p, k in after.items() if p not in before} == {}, purged.stdout + purged.stderr
    assert [p for p in before if p not in after] == []
    assert daemon_json.read_text() == original


def test_rpm_scriptlets_in_a_debian_root(built, bookworm_base, tmp_path):
    """rpm (the host's) installs the .rpm into a Debian root with the interpreter, runc and systemd
    (rpm's own database knows no Debian package, hence --nodeps): %post applies the preset (both
    units enabled), %posttrans byte-compiles and says there is no driver; an upgrade keeps a unit the
    admin disabled disabled; erasing undoes `nvidia-ctk runtime configure` and leaves nothing, since
    unchanged %config(noreplace) files go too."""
    _need_root_and("rpm")
    root = tmp_path / "root"
    root.mkdir()
    sh(["tar", "-C", str(root), "-xf", str(bookworm_base)])
    shutil.copy2("/etc/resolv.conf", root / "etc/resolv.conf")
    box = Chroot(root)
    box.run("apt-get install -y -q --no-install-recommends python3.11 runc systemd", timeout=600)
    sh(["rpm", "--root", str(root), "--initdb"])
    (root / "etc/sysconfig").mkdir()  # on rpm distributions the filesystem package owns it
    skip_db = ("/var/lib/rpm", "/usr/lib/sysimage")
    before = {p: k for p, k in box.files().items() if not p.startswith(skip_db)}
    installed = sh(["rpm", "--root", str(root), "-i", "--nodeps", str(built["rpm"])], env={"PATH": CLEAN_PATH})
    assert "no NVIDIA driver found; no CDI spec written" in installed.stdout + installed.stderr
    assert (root / "usr/bin/nvidia-ctk").is_symlink() and (root / "etc/sysconfig/nvidia-cdi-refresh").is_file()
    assert list((root / PREFIX[1:]).rglob("__pycache__/*.pyc")), "%posttrans compiles the bytecode"
    assert "0.1.0" in box.run("nvidia-ctk --version").stdout
    assert (root / WANTS / "nvidia-cdi-refresh.path").is_symlink()
    assert (root / WANTS / "nvidia-cdi-refresh.service").is_symlink()
    # an upgrade ($1 = 2) keeps what the admin chose
    box.run("systemctl disable nvidia-cdi-refresh.path")
    sh(["rpm", "--root", str(root), "-U", "--replacepkgs", "--nodeps", str(built["rpm"])], env={"PATH": CLEAN_PATH})
    assert not os.path.lexists(root / WANTS / "nvidia-cdi-refresh.path")  # the link, not its target
    assert (root / WANTS / "nvidia-cdi-refresh.service").is_symlink()
    box.run("nvidia-ctk runtime configure --runtime=docker")
    assert (root / "etc/docker/daemon.json").is_file()
    erased = sh(["rpm", "--root", str(root), "-e", "gpu-container-toolkit"], env={"PATH": CLEAN_PATH})
    assert "removed /etc/docker/daemon.json" in erased.stdout, erased.stdout + erased.stderr
    after = {p: k for p, k in box.files().items() if not p.startswith(skip_db)}
    # nvidia-ctk made /etc/docker (on a real host docker's package has it)
    assert {p: k for p, k in after.items() if p not in before} == {"/etc/docker": "dir"}
    assert [p for p in before if p not in after] == []


# --- docker on this machine, in a private mount namespace -----------------------------------------

# a spec of another vendor (valid: engines that read /run/cdi meanwhile must not trip on it)
OTHER_SPEC = 'cdiVersion: "0.5.0"\nkind: vendor.com/device\ndevices:\n- name: x\n  containerEdits:\n    env: ["X=1"]'


class OverlayHost:
    """This machine with /usr, /etc and /var overlaid (upper layers in a temp dir) and an empty /run,
    held by a sleeping process in a private mount namespace; `run` executes there. The host sees none
    of it, and what the host has in /run (a /run/cdi or not, a running systemd) does not matter."""

    DIRS = ("usr", "etc", "var")

    def __init__(self, base: Path):
        self.base = base
        mounts = "; ".join(
            f"mkdir -p {base}/{d}-upper {base}/{d}-work && mount -n -t overlay overlay -o "
            f"lowerdir=/{d},upperdir={base}/{d}-upper,workdir={base}/{d}-work /{d}" for d in self.DIRS)
        self.holder = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c",
             f"set -e; {mounts}; mount -n -t tmpfs -o mode=0755 gct-run /run; echo ready; exec sleep 3600"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        line = self.holder.stdout.readline()
        if line.strip() != "ready":
            self.holder.kill()
            raise AssertionError(f"cannot set up the overlays: {self.holder.stderr.read()}")

    def prefix(self) -> list[str]:
        return ["nsenter", f"--target={self.holder.pid}", "--mount", "--"]

    def run(self, argv: list[str], env: dict[str, str] | None = None, check: bool = True,
            timeout: float = 300) -> subprocess.CompletedProcess:
        return sh(self.prefix() + argv, env={"PATH": CLEAN_PATH, "LANG": "C.UTF-8", **(env or {})},
                  check=check, timeout=timeout)

    def changed(self, d: str) -> list[str]:
        """What differs from the host under /d: new or changed files and links, new directories, and
        deletions (whiteouts). Directories the host has were only copied up to hold a change."""
        upper = self.base / f"{d}-upper"
        found = []
        for path in upper.rglob("*"):
            host_path = "/" + d + "/" + str(path.relative_to(upper))
            if path.is_dir() and not path.is_symlink() and os.path.isdir(host_path):
                continue
            found.append(host_path + (" (deleted)" if path.is_char_device() else ""))
        return sorted(found)

    def run_dir(self) -> dict[str, str]:
        """path -> kind of everything in this host's /run."""
        run = Path(f"/proc/{self.holder.pid}/root/run")
        return {"/run/" + str(p.relative_to(run)): "dir" if p.is_dir() and not p.is_symlink() else "file"
                for p in run.rglob("*")}

    def close(self) -> None:
        self.holder.kill()
        self.holder.wait()


def installed_modules(tree: Path) -> set[str]:
    site = next((tree / PREFIX[1:] / "lib").glob("python3.*/site-packages"))
    return {str(p.relative_to(site)) for p in site.rglob("*.py")}


def test_docker_with_the_installed_deb_gives_containers_their_gpu(built, deb_tree):
    _need_root_and("dockerd", "containerd", "runc", "nsenter", "dpkg")
    modules = installed_modules(deb_tree)
    missing = [m for m in ("runtime_shim/main.py", "hook/prestart.py") if m not in modules]
    if missing:
        pytest.skip(f"the package has no {', '.join(missing)} yet (the runtime shim and prestart hook issues)")
    base = Path(tempfile.mkdtemp(prefix="gct-pkg-", dir="/tmp"))
    host = OverlayHost(base / "ovl")
    daemon: Daemon | None = None
    try:
        deb = base / built["deb"].name
        shutil.copy2(built["deb"], deb)
        # a /run/cdi that was there before, with another vendor's spec
        host.run(["sh", "-c", f"mkdir /run/cdi && echo '{OTHER_SPEC}' > /run/cdi/vendor.yaml"])
        done = host.run(["dpkg", "-i", str(deb)])
        assert "no NVIDIA driver found" in done.stdout
        host.run(["nvidia-ctk", "simulate", "create", "--gpus", "2", str(base / "sim")])
        sim = json.loads((base / "sim/.nvidia-simulated-host.json").read_text())
        config = base / "config.toml"
        config.write_text(f'[nvidia-container-cli]\nroot = "{base / "sim"}"\n')
        daemon_json = base / "daemon.json"
        host.run(["nvidia-ctk", "runtime", "configure", "--runtime=docker", f"--config={daemon_json}"])
        assert json.loads(daemon_json.read_text())["runtimes"]["nvidia"]["path"] == "/usr/bin/nvidia-container-runtime"

        workdir = base / "d"
        workdir.mkdir()
        (workdir / "data").mkdir()
        (workdir / "exec").mkdir()
        socket = workdir / "docker.sock"
        cgroup_parent = unique_cgroup_parent("dockerd")
        argv = host.prefix() + [
            "env", "-i", f"PATH={CLEAN_PATH}", f"NVIDIA_CTK_CONFIG_FILE_PATH={config}",
            f"TMPDIR={daemon_tmpdir(workdir)}",
            "dockerd", *dockerd_private_args(workdir, socket, daemon_json, cgroup_parent)]
        # in the overlaid host's namespace (its /run is that host's), not one of its own
        daemon = _spawn("dockerd", argv, workdir, socket, [workdir / "data", workdir / "exec"], own_run=False)
        daemon.cgroup_parent = cgroup_parent
        _wait_for(lambda: socket.exists() and docker(daemon, "version", check=False, timeout=10).returncode == 0,
                  daemon, "its API answered")
        docker(daemon, "import", str(busybox_image_tar(base)), "gct-busybox")
        probe = "ls /dev/nvidia0 /dev/nvidia1 2>/dev/null; nvidia-smi -L"
        gpus = sim["inventory"]["gpus"]

        by_env = docker(daemon, "run", "--rm", "--runtime=nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=1", "gct-busybox",
                        "sh", "-c", probe)
        assert "/dev/nvidia1" in by_env.stdout and "/dev/nvidia0" not in by_env.stdout, by_env.stdout
        assert f"(UUID: {gpus[1]['uuid']})" in by_env.stdout, by_env.stdout

        by_gpus = docker(daemon, "run", "--rm", "--gpus", "1", "gct-busybox", "sh", "-c", probe)
        assert "/dev/nvidia0" in by_gpus.stdout and "/dev/nvidia1" not in by_gpus.stdout, by_gpus.stdout
        assert f"(UUID: {gpus[0]['uuid']})" in by_gpus.stdout, by_gpus.stdout

        stop_daemon(daemon)
        daemon = None
        # a spec at the package's path that the package did not write (the admin's)
        host.run(["sh", "-c", f"echo '{OTHER_SPEC}' | sed 's/vendor.com/nvidia.com/' > /run/cdi/nvidia.yaml"])
        host.run(["dpkg", "-r", "gpu-container-toolkit"])
        # what dockerd and dpkg keep for themselves is not the package's
        theirs = ("/var/lib/dpkg", "/var/log", "/var/cache", "/etc/docker", "/var/lib/docker", "/run/docker",
                  "/run/containerd", "/var/lib/containerd", "/run/needrestart")
        left = [p for d in OverlayHost.DIRS for p in host.changed(d) if not p.startswith(theirs)]
        # /etc keeps the conffiles (and their directory) and the units' enabled state, which
        # deb-systemd-helper records under /var/lib/systemd until purge; nothing else of the package
        kept = {*CONFFILES_DEB, "/etc/nvidia-container-runtime", "/etc/nvidia-device-plugin",
                *(f"/{WANTS}/{u}" for u in UNITS)}
        assert kept <= set(left), left
        assert [p for p in left if p not in kept and not p.startswith("/var/lib/systemd/deb-systemd-helper-")] == []
        # /run/cdi and the specs the package did not write are there as before; the runtime's cache
        # dir is gone
        before = {"/run/cdi": "dir", "/run/cdi/vendor.yaml": "file", "/run/cdi/nvidia.yaml": "file"}
        assert {p: k for p, k in host.run_dir().items() if not p.startswith(theirs)} == before
        host.run(["dpkg", "--purge", "gpu-container-toolkit"])
        assert [p for d in OverlayHost.DIRS for p in host.changed(d) if not p.startswith(theirs)] == []
        assert {p: k for p, k in host.run_dir().items() if not p.startswith(theirs)} == before

        # no /run/cdi before: the package makes it for its spec, and the purge takes it again
        host.run(["rm", "-r", "/run/cdi"])
        done = host.run(["dpkg", "-i", str(deb)], env={"NVIDIA_CTK_DRIVER_ROOT": str(base / "sim")})
        assert "wrote the CDI spec /var/run/cdi/nvidia.yaml" in done.stdout
        assert "/run/cdi/nvidia.yaml" in host.run_dir()
        host.run(["dpkg", "--purge", "gpu-container-toolkit"])
        assert {p: k for p, k in host.run_dir().items() if not p.startswith(theirs)} == {}
    finally:
        if daemon is not None:
            stop_daemon(daemon)
        host.close()
        time.sleep(0.2)
        subprocess.run(["rm", "-rf", str(base)])


# --- README's walkthrough, line by line ------------------------------------------------------------

WALKTHROUGH_MARK = "<!-- walkthrough:docker"


def walkthrough_commands() -> list[str]:
    """The shell lines of README's Docker walkthrough (the ```sh block after its mark), comments cut."""
    text = (REPO / "README.md").read_text()
    fence = text.index("```sh\n", text.index(WALKTHROUGH_MARK)) + len("```sh\n")
    block = text[fence:text.index("```", fence)]
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip() and not line.startswith("#")]


def test_the_readme_walkthrough_runs_as_written(built):
    """Issue 27.13: README's walkthrough (install the .deb with apt, a simulated GPU host, configure Docker,
    run a GPU container) run line by line on this machine inside OverlayHost. Only two things stand in for
    what a test cannot do there: `systemctl restart docker` starts a private dockerd (its own socket, data
    and cgroup parent, the daemon.json the walkthrough wrote), and `ubuntu:24.04` is busybox imported under
    that name (no registry); every other line runs verbatim."""
    _need_root_and("dockerd", "containerd", "runc", "nsenter", "apt")
    commands = walkthrough_commands()
    assert commands[0].startswith("apt install ./") and commands[-1].startswith("docker run "), commands
    base = Path(tempfile.mkdtemp(prefix="gct-walk-", dir="/tmp"))
    host = OverlayHost(base / "ovl")
    daemon: Daemon | None = None
    try:
        shutil.copy2(built["deb"], base / commands[0].split("./")[1].split()[0])
        ran = None
        for command in commands:
            if command.startswith("systemctl restart docker"):
                workdir = base / "d"
                for folder in ("data", "exec"):
                    (workdir / folder).mkdir(parents=True)
                socket = workdir / "docker.sock"
                cgroup_parent = unique_cgroup_parent("dockerd")
                argv = host.prefix() + [
                    "env", "-i", f"PATH={CLEAN_PATH}", f"TMPDIR={daemon_tmpdir(workdir)}", "dockerd",
                    *dockerd_private_args(workdir, socket, Path("/etc/docker/daemon.json"), cgroup_parent)]
                daemon = _spawn("dockerd", argv, workdir, socket, [workdir / "data", workdir / "exec"],
                                own_run=False)
                daemon.cgroup_parent = cgroup_parent
                _wait_for(lambda: socket.exists() and docker(daemon, "version", check=False, timeout=10)
                          .returncode == 0, daemon, "its API answered")
                docker(daemon, "import", str(busybox_image_tar(base)), "ubuntu:24.04")
            elif command.startswith("docker "):
                assert daemon is not None, "the walkthrough runs docker before (re)starting it"
                ran = docker(daemon, *command.split()[1:])
            else:
                host.run(["sh", "-c", f"cd {base} && {command}"], env={"DEBIAN_FRONTEND": "noninteractive"})
        marker = Path(f"/proc/{host.holder.pid}/root/var/lib/gct-simulated-host/.nvidia-simulated-host.json")
        gpus = json.loads(marker.read_text())["inventory"]["gpus"]
        assert ran.stdout.splitlines() == [f"GPU {i}: NVIDIA A100-SXM4-40GB (UUID: {gpu['uuid']})"
                                           for i, gpu in enumerate(gpus)], ran.stdout + ran.stderr
    finally:
        if daemon is not None:
            stop_daemon(daemon)
        host.close()
        time.sleep(0.2)
        subprocess.run(["rm", "-rf", str(base)])

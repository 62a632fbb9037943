"""The package build's own logic, without building: changelog in both formats, templates, the
Debian description field, dependencies from ELF files, and the shipped changelog agreeing with
pyproject.toml. Fast; no root needed."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support.pkgtools import PACKAGING, REPO, load_pkgtools

load_pkgtools()
from pkgtools import deb, layout, metadata  # noqa: E402
from pkgtools.errors import BuildError  # noqa: E402

ENTRY = """\
gpu-container-toolkit (0.2.0-1) unstable; urgency=medium

  * Second: a change that is long enough to wrap onto
    a second line, with 100% of the text.
  * Another change.

 -- A Maintainer <a@example.invalid>  Mon, 23 Nov 2026 10:00:00 +0000

gpu-container-toolkit (0.1.0-1) unstable; urgency=low

  * First.

 -- A Maintainer <a@example.invalid>  Sun, 22 Nov 2026 03:30:00 +0000
"""


def test_changelog_entries_and_their_rpm_form():
    entries = metadata.parse_changelog(ENTRY)
    assert [e.version for e in entries] == ["0.2.0-1", "0.1.0-1"]
    assert entries[0].changes == ["Second: a change that is long enough to wrap onto a second line, with 100% of "
                                  "the text.", "Another change."]
    assert entries[0].maintainer == "A Maintainer <a@example.invalid>"
    assert metadata.rpm_changelog(entries) == (
        "* Mon Nov 23 2026 A Maintainer <a@example.invalid> - 0.2.0-1\n"
        "- Second: a change that is long enough to wrap onto a second line, with 100%% of the text.\n"
        "- Another change.\n\n"
        "* Sun Nov 22 2026 A Maintainer <a@example.invalid> - 0.1.0-1\n"
        "- First.\n")


@pytest.mark.parametrize("text, message", [
    ("", "empty"),
    ("  * a change before any header\n", "expected a 'package (version)"),
    ("gpu-container-toolkit (0.1.0-1) unstable; urgency=low\n\n  * First.\n", "no ' -- maintainer  date'"),
    ("gpu-container-toolkit (0.1.0-1) unstable; urgency=low\n\n -- A <a@b.invalid>  Sun, 22 Nov 2026 03:30:00 +0000\n",
     "without changes"),
    ("gpu-container-toolkit (0.1.0-1) unstable; urgency=low\n  * x\nstray line\n", "unexpected changelog line"),
])
def test_changelog_errors_name_the_line(text, message):
    with pytest.raises(BuildError) as info:
        metadata.parse_changelog(text, "changelog")
    assert message in str(info.value)


def test_the_shipped_changelog_matches_pyproject():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    newest = metadata.parse_changelog((PACKAGING / "changelog").read_text())[0]
    assert newest.package == project["name"]
    assert newest.version.rsplit("-", 1)[0] == project["version"]


def test_templates_render_and_a_missing_value_is_an_error(tmp_path):
    for flavour in (layout.DEB, layout.RPM):
        values = layout.substitutions(flavour)
        for template in ("libexec/nvidia-cdi-refresh", "libexec/gct-package-setup", "libexec/gct-engine-undo",
                         "systemd/50-gpu-container-toolkit.preset", "default/nvidia-cdi-refresh",
                         "systemd/nvidia-cdi-refresh.service", "udev/71-nvidia-cdi-refresh.rules",
                         "debian/postinst", "debian/prerm", "debian/postrm"):
            text = layout.render(PACKAGING / template, values)
            assert "@" not in text.replace("@/sbin", ""), template
            if text.startswith("#!/bin/sh"):
                path = tmp_path / Path(template).name
                path.write_text(text)
                assert subprocess.run(["sh", "-n", str(path)]).returncode == 0, template
        assert flavour.environment_file in layout.render(PACKAGING / "systemd/nvidia-cdi-refresh.service", values)
    bad = tmp_path / "bad.in"
    bad.write_text("x=@PREFIX@ y=@NOPE@\n")
    with pytest.raises(BuildError, match="no value for @NOPE@"):
        layout.render(bad, layout.substitutions(layout.DEB))


def test_debian_description_field_is_folded_without_breaking_words():
    field = deb.description_field("summary", ["word " * 40 + "nvidia-container-runtime-hook", "second"])
    lines = field.splitlines()
    assert lines[0] == "Description: summary"
    assert all(line.startswith(" ") and len(line) <= 76 for line in lines[1:])
    assert " ." in lines and "nvidia-container-runtime-hook" in field.replace("\n ", " ")
    assert deb.debian_depends("/usr/bin/python3.11", ["libcap2 (>= 1:2.66)"]) == [
        "python3.11", "python3 (>= 3.11)", "runc | crun", "libcap2 (>= 1:2.66)"]


@pytest.mark.skipif(not shutil.which("gcc") or not shutil.which("objdump") or not shutil.which("dpkg-query")
                    or not Path(metadata.ELFDEPS).exists(), reason="needs gcc, objdump, dpkg and rpm")
def test_library_dependencies_come_from_the_elf_files(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    src = tmp_path / "m.c"
    # libm: its development files come with libc6-dev, which the build needs anyway
    src.write_text("#include <math.h>\ndouble f(double x) { return cos(x); }\n")
    built = subprocess.run(["gcc", "-shared", "-fPIC", str(src), "-o", str(tree / "m.so"), "-lm"],
                           capture_output=True, text=True)
    if built.returncode != 0:
        pytest.skip(f"cannot link against libm here: {built.stderr.strip()[:200]}")
    needed = metadata.external_sonames(tree)
    assert "libm.so.6" in needed and needed["libm.so.6"] == [tree / "m.so"]
    depends = metadata.debian_library_dependencies(sorted(needed))
    assert any(d.startswith("libc6 (>= ") for d in depends), depends
    # rpm: the sonames and the symbol versions they must define (AutoReqProv is off: issue 14, item 17)
    requires = metadata.rpm_library_dependencies(tree)
    assert "libm.so.6()(64bit)" in requires
    assert any(re.fullmatch(r"libm\.so\.6\(GLIBC_2\.[0-9.]+\)\(64bit\)", r) for r in requires), requires
    with pytest.raises(BuildError, match="no installed package provides libnothing.so.9"):
        metadata.debian_library_dependencies(["libnothing.so.9"])


def test_control_provides_nvidia_packages_at_their_version_and_replaces_them():
    """Provides carry NVIDIA's version (an unversioned Provides satisfies no versioned dependency, so
    installing removed nvidia-docker2); only nvidia-container-runtime up to 3.5.0-1 is in the way."""
    from pkgtools.source import Project
    text = deb.control_text(Project("gpu-container-toolkit", "0.1.0", "d", "Apache-2.0"), "0.1.0-1", "M <m@x.invalid>",
                            ["python3.11"], [], 1)
    fields = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line and not line.startswith(" "))
    version = metadata.NVIDIA_VERSION
    assert fields["Provides"] == (f"nvidia-container-toolkit (= {version}), nvidia-container-toolkit-base (= {version}), "
                                  f"libnvidia-container-tools (= {version})")
    assert fields["Conflicts"] == ("nvidia-container-toolkit, nvidia-container-toolkit-base, libnvidia-container-tools, "
                                   "nvidia-container-runtime-hook")
    assert fields["Breaks"] == "nvidia-container-runtime (<= 3.5.0-1)"
    assert fields["Replaces"] == fields["Conflicts"] + ", nvidia-container-runtime (<= 3.5.0-1)"
    from pkgtools import rpm
    assert f"Provides:       nvidia-container-toolkit = {version}" in rpm.relations().splitlines()
    assert "Conflicts:      nvidia-container-runtime <= 3.5.0-1" in rpm.relations().splitlines()


def _refresh_script(tmp_path: Path, ctk_body: str, defaults: str = "") -> tuple[Path, dict[str, str]]:
    """The refresh program rendered with a temp environment file and a stand-in nvidia-ctk."""
    env_file = tmp_path / "nvidia-cdi-refresh.env"
    env_file.write_text(defaults)
    script = tmp_path / "nvidia-cdi-refresh"
    script.write_text(layout.render(PACKAGING / "libexec/nvidia-cdi-refresh",
                                    {"PREFIX": "/nonexistent", "ENVIRONMENT_FILE": str(env_file)}))
    script.chmod(0o755)
    ctk = tmp_path / "nvidia-ctk"
    ctk.write_text("#!/bin/sh\n" + ctk_body)
    ctk.chmod(0o755)
    return script, {"PATH": "/usr/bin:/bin", "NVIDIA_CTK": str(ctk)}


def test_refresh_writes_the_spec_named_in_the_environment_file(tmp_path):
    spec = tmp_path / "cdi" / "nvidia.yaml"
    script, env = _refresh_script(
        tmp_path, 'for a; do case "$a" in --output=*) echo spec > "${a#--output=}";; esac; done\n'
                  'echo "$@" > "$(dirname "$0")/args"\n',
        defaults=f"NVIDIA_CDI_SPEC_FILE={spec}\nNVIDIA_CDI_GENERATE_OPTIONS=--device-name-strategy=uuid\n")
    done = subprocess.run([str(script)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"nvidia-cdi-refresh: wrote the CDI spec {spec}\n"
    assert spec.read_text() == "spec\n"
    assert (tmp_path / "args").read_text().split() == ["cdi", "generate", f"--output={spec}",
                                                       "--device-name-strategy=uuid"]


# a stand-in nvidia-ctk that writes a spec while $(dirname $0)/driver exists, else says there is no driver
CTK_WITH_DRIVER_FILE = (
    'if [ ! -e "$(dirname "$0")/driver" ]; then\n'
    '  echo "nvidia-ctk: error: no NVIDIA driver: libnvidia-ml.so.1 is not installed (driver root /)" >&2; exit 1\n'
    'fi\n'
    'for a; do case "$a" in --output=*) echo "kind: nvidia.com/gpu" > "${a#--output=}";; esac; done\n')


def _refresh(script: Path, env: dict[str, str], *args: str) -> str:
    done = subprocess.run([str(script), *args], capture_output=True, text=True, env=env)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout


def test_refresh_without_a_driver_removes_the_spec_it_wrote_and_succeeds(tmp_path):
    spec = tmp_path / "run" / "cdi" / "nvidia.yaml"
    script, env = _refresh_script(tmp_path, CTK_WITH_DRIVER_FILE, defaults=f"NVIDIA_CDI_SPEC_FILE={spec}\n")
    (tmp_path / "driver").touch()
    assert _refresh(script, env) == f"nvidia-cdi-refresh: wrote the CDI spec {spec}\n"
    (tmp_path / "driver").unlink()
    assert "no NVIDIA driver found; removed the CDI spec" in _refresh(script, env)
    # with the record and the directories it made for the spec (run/ and run/cdi/)
    assert not (tmp_path / "run").exists()
    assert "no NVIDIA driver found; no CDI spec written" in _refresh(script, env)
    assert not (tmp_path / "run").exists(), "no directory is left when nothing was written"


def test_refresh_never_removes_what_it_did_not_make(tmp_path):
    """A spec dir that was there before, with another vendor's spec: after a write and the removal
    both are there as before; a spec changed since it was written, or written by someone else,
    stays."""
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    (spec_dir / "vendor.yaml").write_text("kind: vendor.com/device\n")
    spec = spec_dir / "nvidia.yaml"
    script, env = _refresh_script(tmp_path, CTK_WITH_DRIVER_FILE, defaults=f"NVIDIA_CDI_SPEC_FILE={spec}\n")
    (tmp_path / "driver").touch()
    _refresh(script, env)
    assert spec.is_file()
    assert _refresh(script, env, "--remove") == ""
    assert sorted(p.name for p in spec_dir.iterdir()) == ["vendor.yaml"]

    (vendor_dir := tmp_path / "empty-before").mkdir()
    script, env = _refresh_script(tmp_path, CTK_WITH_DRIVER_FILE,
                                  defaults=f"NVIDIA_CDI_SPEC_FILE={vendor_dir}/nvidia.yaml\n")
    _refresh(script, env)
    _refresh(script, env, "--remove")
    assert vendor_dir.is_dir() and list(vendor_dir.iterdir()) == [], "a directory that was there stays"

    script, env = _refresh_script(tmp_path, CTK_WITH_DRIVER_FILE, defaults=f"NVIDIA_CDI_SPEC_FILE={spec}\n")
    _refresh(script, env)
    with open(spec, "a") as f:
        f.write("# the admin's\n")
    (tmp_path / "driver").unlink()
    assert "left the CDI spec" in _refresh(script, env)
    assert "left the CDI spec" in _refresh(script, env, "--remove")
    assert spec.read_text().endswith("# the admin's\n")
    spec.write_text("someone else's\n")
    assert "left the CDI spec" in _refresh(script, env, "--remove") and spec.exists()


def test_refresh_never_overwrites_a_spec_it_did_not_write(tmp_path):
    """With a driver present: a hand-made spec at the path, or the spec written here and edited
    since, is left as it is (issue 27, item 10: install and upgrade overwrote an admin's spec);
    once the admin removes it, the refresh writes one again."""
    spec = tmp_path / "cdi" / "nvidia.yaml"
    spec.parent.mkdir()
    spec.write_text("kind: nvidia.com/gpu\n# the admin's own\n")
    script, env = _refresh_script(tmp_path, CTK_WITH_DRIVER_FILE, defaults=f"NVIDIA_CDI_SPEC_FILE={spec}\n")
    (tmp_path / "driver").touch()
    assert _refresh(script, env) == (f"nvidia-cdi-refresh: left the CDI spec {spec}: this package did not write it "
                                     "as it is now (remove it for a new one)\n")
    assert spec.read_text().endswith("# the admin's own\n")
    assert sorted(p.name for p in spec.parent.iterdir()) == ["nvidia.yaml"], "no record of a spec not written"
    spec.unlink()
    assert "wrote the CDI spec" in _refresh(script, env)
    assert "wrote the CDI spec" in _refresh(script, env), "its own spec is written again"
    with open(spec, "a") as f:
        f.write("# edited\n")
    assert "left the CDI spec" in _refresh(script, env)
    assert spec.read_text().endswith("# edited\n")


def _package_setup(tmp_path: Path, unit_state: str | None) -> tuple[subprocess.CompletedProcess, Path]:
    """gct-package-setup configure with stand-ins: the environment's python, the refresh program (it
    notes that it ran) and, unless unit_state is None, a systemctl whose is-enabled answers
    unit_state for nvidia-cdi-refresh.service. The package's state dirs are moved under tmp_path."""
    prefix = tmp_path / "prefix"
    for name, body in (("bin/python", "exit 0"), ("libexec/nvidia-cdi-refresh", 'echo ran > "$(dirname "$0")/ran"')):
        (prefix / name).parent.mkdir(parents=True, exist_ok=True)
        (prefix / name).write_text(f"#!/bin/sh\n{body}\n")
        (prefix / name).chmod(0o755)
    fake_bin = tmp_path / "fake-bin"
    fake_bin.mkdir()
    for tool in ("sh", "rm", "rmdir", "dirname", "find", "readlink"):
        (fake_bin / tool).symlink_to(shutil.which(tool))
    if unit_state is not None:
        (fake_bin / "systemctl").write_text(
            '#!/bin/sh\n[ "$1 $2" = "is-enabled nvidia-cdi-refresh.service" ] || exit 9\n'
            f'echo {unit_state}\n[ {unit_state} = enabled ]\n')
        (fake_bin / "systemctl").chmod(0o755)
    script = tmp_path / "gct-package-setup"
    text = layout.render(PACKAGING / "libexec/gct-package-setup", {"PREFIX": str(prefix)})
    text = text.replace("/var/lib/gpu-container-toolkit", str(tmp_path / "var-lib")).replace(
        "/run/nvidia-container-toolkit", str(tmp_path / "run"))
    script.write_text(text)
    done = subprocess.run(["sh", str(script), "configure"], capture_output=True, text=True,
                          env={"PATH": str(fake_bin)}, timeout=60)
    assert done.returncode == 0, done.stderr
    return done, prefix / "libexec" / "ran"


@pytest.mark.parametrize("state, refreshes", [("enabled", True), ("disabled", False), ("masked", False),
                                              ("masked-runtime", False), ("static", True), (None, True)])
def test_post_install_writes_the_spec_only_where_the_refresh_unit_is_not_disabled(tmp_path, state, refreshes):
    """Install and upgrade (postinst configure, rpm %posttrans) regenerate the CDI spec only where
    nvidia-cdi-refresh.service would run: not where the admin disabled or masked it (issue 27, item
    10). Without systemctl (a host without systemd) the spec is written."""
    done, ran = _package_setup(tmp_path, state)
    assert ran.exists() == refreshes, done.stdout
    if not refreshes:
        assert done.stdout == (f"gpu-container-toolkit: nvidia-cdi-refresh.service is {state}: the CDI spec was not "
                               f"regenerated; {tmp_path}/prefix/libexec/nvidia-cdi-refresh writes it once\n")


def test_refresh_with_another_error_fails_and_shows_it(tmp_path):
    spec = tmp_path / "nvidia.yaml"
    script, env = _refresh_script(tmp_path, 'echo "nvidia-ctk: error: invalid TOML (config.toml)" >&2\nexit 1\n',
                                  defaults=f"NVIDIA_CDI_SPEC_FILE={spec}\n")
    done = subprocess.run([str(script)], capture_output=True, text=True, env=env)
    assert done.returncode == 1
    assert "invalid TOML" in done.stderr and "the CDI spec was not written" in done.stderr


def test_nvidia_ctk_says_no_nvidia_driver_in_the_words_the_refresh_looks_for(tmp_path):
    """The refresh tells "no driver" (exit 0) from a failure by this phrase of nvidia-ctk's error."""
    done = subprocess.run([sys.executable, "-m", "ctk.main", "cdi", "generate", "--driver-root", str(tmp_path),
                           "--output", str(tmp_path / "x.yaml")], capture_output=True, text=True, cwd=REPO,
                          env={"PATH": "/usr/bin:/bin", "NVIDIA_CTK_CONFIG_FILE_PATH": str(tmp_path / "none.toml")})
    assert done.returncode != 0
    assert "no NVIDIA driver" in done.stderr, done.stderr
    grep_phrase = re.search(r'grep -q "([^"]+)"', (PACKAGING / "libexec/nvidia-cdi-refresh").read_text())[1]
    assert grep_phrase in done.stderr


def test_the_packages_drop_every_test_only_launcher():
    """venv_build keeps its own list (it runs in the package's tree, not this checkout's): the launcher
    probes must never be shipped."""
    from launcher import install_launchers
    from pkgtools import venv_build

    assert venv_build.TEST_ONLY_PROGRAMS == set(install_launchers.TEST_ONLY_PROGRAMS)


def test_only_programs_keep_an_execute_bit(tmp_path):
    """Wheels such as protobuf's install plain modules with mode 0755; in the packages only an ELF
    file or a script stays executable (lintian: executable-not-elf-or-script)."""
    files = {"module.py": (b"import os\n", 0o755), "script": (b"#!/bin/sh\nexit 0\n", 0o700),
             "data.txt": (b"x", 0o600), "prog": (Path(sys.executable).resolve().read_bytes()[:64], 0o750)}
    for name, (data, mode) in files.items():
        (tmp_path / name).write_bytes(data)
        (tmp_path / name).chmod(mode)
    layout._normalise_modes(tmp_path)
    modes = {name: (tmp_path / name).stat().st_mode & 0o7777 for name in files}
    assert modes == {"module.py": 0o644, "script": 0o755, "data.txt": 0o644, "prog": 0o755}

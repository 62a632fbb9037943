"""The one table of nvidia-cdi-hook argument chains (args_cases.json), held against both readers of
them: hook.cdi_hook.parse_args (live injection re-reads the spec's hook entry) and the C program
itself, run for real on a throwaway rootfs, where what it did is looked at: the links it made, the
folders its ldconfig got (a static stand-in that records its argv, or the ld.so.conf.d drop-in), the
ldconfig it ran, the config.json it read, its warnings and its error line."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hook.cdi_hook import HookError, parse_args

TABLE = Path(__file__).with_name("args_cases.json")
CASES = json.loads(TABLE.read_text())["cases"]
# the installed program; GCT_TEST_CDI_HOOK: another build of it (say one with the sanitizers)
HOOK = Path(os.environ.get("GCT_TEST_CDI_HOOK") or Path(sys.executable).parent / "nvidia-cdi-hook")
DEFAULTS = {"links": [], "folders": [], "update_ldcache": False, "ldconfig": "/sbin/ldconfig",
            "host_driver_version": None, "disable_device_node_modification": False,
            "update_application_profile": False, "params_file": "/proc/driver/nvidia/params", "container_spec": None, "warnings": [], "error": None}
COMPAT = "/usr/local/cuda/compat"   # the rootfs' compat libraries are for a driver 999999: used whenever
COMPAT_LIB = "libcuda.so.999999.0"  # a host driver version was read
WARNING, ERROR = "nvidia-cdi-hook: warning: ", "nvidia-cdi-hook: error: "
# how the C program says which ldconfig it tried when that one does not exist
MISSING_LDCONFIG = re.compile(r"ldconfig failed: open ldconfig: \[Errno 2\] No such file or directory: '(.*)' \((.*)\)")
FAKE_LDCONFIG = r"""
#include <stdio.h>
int main(int argc, char **argv)
{
    FILE *f = fopen("/ldconfig-argv", "w");
    if (!f)
        return 3;
    for (int i = 0; i < argc; i++)
        fprintf(f, "%s\n", argv[i]);
    return fclose(f) ? 4 : 0;
}
"""

parametrize_cases = pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])


def fill(value, paths: dict):
    """The case with the test's paths put in for {fake_ldconfig} and {spec}."""
    text = json.dumps(value)
    for name, path in paths.items():
        text = text.replace("{" + name + "}", str(path))
    return json.loads(text)


def expected(case, paths: dict) -> dict:
    want = {**DEFAULTS, **{k: v for k, v in case.items() if k not in ("name", "args")}}
    return fill(want, paths)


def test_the_table_is_well_formed():
    names = [c["name"] for c in CASES]
    assert len(names) == len(set(names))
    for case in CASES:
        assert set(case) <= {"name", "args", *DEFAULTS}, case["name"]


@parametrize_cases
def test_python_parser(case):
    paths = {"fake_ldconfig": "/opt/fake/ldconfig", "spec": "/opt/spec.json"}
    want = expected(case, paths)
    try:
        tasks = parse_args(fill(case["args"], paths))
    except HookError as e:
        assert str(e) == want["error"]
        return
    assert want["error"] is None
    seen = {"links": [list(link) for link in tasks.links], "folders": tasks.folders,
            "update_ldcache": tasks.update_ldcache, "ldconfig": tasks.ldconfig,
            "host_driver_version": tasks.host_driver_version,
            "disable_device_node_modification": tasks.disable_device_node_modification,
            "update_application_profile": tasks.update_application_profile, "params_file": tasks.params_file, "container_spec": tasks.container_spec, "warnings": tasks.warnings,
            "error": None}
    assert seen == want
    assert tasks.empty == (not want["links"] and not want["update_ldcache"]
                           and not want["disable_device_node_modification"] and not want["update_application_profile"])


# -- the C program ---------------------------------------------------------------------------------

needs_root = pytest.mark.skipif(os.geteuid() != 0 or not HOOK.exists(),
                                reason="needs root (the ldconfig sandbox) and the installed launcher (make venv)")


@pytest.fixture(scope="module")
def fake_ldconfig(tmp_path_factory):
    d = tmp_path_factory.mktemp("fake-ldconfig")
    (d / "ldconfig.c").write_text(FAKE_LDCONFIG)
    subprocess.run(["gcc", "-static", "-O2", "-o", d / "ldconfig", d / "ldconfig.c"], check=True)
    return d / "ldconfig"


def make_root(root: Path, folders) -> Path:
    (root / "etc").mkdir(parents=True)
    (root / COMPAT.lstrip("/")).mkdir(parents=True)
    (root / COMPAT.lstrip("/") / COMPAT_LIB).write_bytes(b"")
    for folder in folders:
        (root / folder.lstrip("/")).mkdir(parents=True, exist_ok=True)
    return root


def symlinks(root: Path) -> dict:
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            if path.is_symlink():
                found["/" + str(path.relative_to(root))] = os.readlink(path)
    return found


def effects(root: Path, fake: Path) -> dict:
    """What the program did in this root."""
    argv = root / "ldconfig-argv"
    conf = root / "etc/ld.so.conf.d/00-nvidia-cdi-hook.conf"
    seen = {"links": symlinks(root), "ldconfig": None, "folders": []}
    if argv.exists():
        ran = argv.read_text().splitlines()
        assert ran[0] == "ldconfig"
        seen["ldconfig"], seen["folders"] = str(fake), ran[1:]
    elif (root / "etc/ld.so.cache").exists():
        seen["ldconfig"] = "/sbin/ldconfig"
    if conf.exists():
        assert conf.read_text().splitlines()[1:] == seen["folders"] or seen["ldconfig"] != str(fake)
        seen["folders"] = conf.read_text().splitlines()[1:]
    seen["compat"] = seen["folders"][:1] == [COMPAT]
    seen["folders"] = seen["folders"][1:] if seen["compat"] else seen["folders"]
    return seen


def observe(result, roots: dict, fake: Path) -> dict:
    lines = result.stderr.splitlines()
    warnings = [line[len(WARNING):] for line in lines if line.startswith(WARNING)]
    errors = [line[len(ERROR):] for line in lines if line.startswith(ERROR)]
    assert len(warnings) + len(errors) == len(lines), result.stderr
    assert result.returncode == (1 if errors else 0), result
    seen = {**DEFAULTS, "warnings": warnings, "links": {}}
    used = [name for name, root in roots.items() if any(effects(root, fake).values())]
    compat = False
    missing = MISSING_LDCONFIG.fullmatch(errors[0]) if errors else None
    if missing:   # not an error of the arguments: it tells which ldconfig was run, and in which root
        seen["ldconfig"], seen["update_ldcache"] = missing.group(1), True
        used = used or [name for name, root in roots.items() if str(root) == missing.group(2)]
    elif errors:
        seen["error"] = errors[0]
    assert len(used) <= 1
    seen["compat"] = False
    if used:
        done = effects(roots[used[0]], fake)
        seen["container_spec"] = "{spec}" if used[0] == "spec" else None
        seen["links"], seen["folders"], compat = done["links"], done["folders"], done["compat"]
        if done["ldconfig"]:
            seen["ldconfig"], seen["update_ldcache"] = done["ldconfig"], True
    seen["compat"] = compat
    return seen


@needs_root
@parametrize_cases
def test_c_program(case, tmp_path, fake_ldconfig):
    paths = {"fake_ldconfig": fake_ldconfig, "spec": tmp_path / "spec.json"}
    want = expected(case, paths)
    bundle = tmp_path / "bundle"
    roots = {"bundle": make_root(bundle / "rootfs", want["folders"]),
             "spec": make_root(tmp_path / "spec-rootfs", want["folders"])}
    (bundle / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}}))
    paths["spec"].write_text(json.dumps({"root": {"path": str(roots["spec"])}}))
    nothing_to_do = not want["links"] and not want["update_ldcache"] and not want["error"] \
        and not want["disable_device_node_modification"] and not want["update_application_profile"]
    # with nothing to do the state is not even read: an invalid one proves it
    state = "not json" if nothing_to_do else json.dumps({"bundle": str(bundle)})
    result = subprocess.run([str(HOOK), *fill(case["args"], paths)], input=state, capture_output=True, text=True,
                            cwd="/", env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, timeout=60)
    seen = observe(result, roots, fake_ldconfig)
    # what a mount namespace would show (test_cdi_hook.py): held to the Python reader only
    # (and the application profile, written for real in test_cdi_hook.py)
    for field in ("disable_device_node_modification", "params_file", "update_application_profile"):
        seen[field] = want[field]
    # a version read shows as the compat folder first, when there was an ld cache to order
    seen["host_driver_version"] = want["host_driver_version"] if seen.pop("compat") or (
        want["host_driver_version"] and not want["update_ldcache"]) else None
    if want["error"]:   # nothing done, no warning printed
        assert seen == {**DEFAULTS, "links": {}, "error": want["error"],
                        **{f: want[f] for f in ("disable_device_node_modification", "params_file",
                                                "update_application_profile")}}
        return
    want["links"] = dict((link, target) for target, link in want["links"])   # on disk: the last one wins
    if want["container_spec"]:
        want["container_spec"] = "{spec}"
    assert seen == want

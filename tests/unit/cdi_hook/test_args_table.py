"""The one table of nvidia-cdi-hook argument chains (args_cases.json), held against both readers of
them: hook.cdi_hook.parse_args (live injection re-reads the spec's hook entry) and the C program
itself, run for real on a throwaway rootfs, where what it did is looked at: the links it made, the
folders its ldconfig got (a static stand-in that records its argv, or the ld.so.conf.d drop-in), the
ldconfig it ran, the config.json it read, its warnings and its error line. Then thousands of generated
chains through both readers (the C one in a probe): the same tasks, warnings and error lines."""
from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cdi.errors import message_line
from hook.cdi_hook import SUBCOMMANDS, HookError, parse_args
# the probe: nvidia-cdi-hook's own C files (args.c and message.c among them) in a test-only program
from tests.unit.cdi_hook.test_json_reader import probe  # noqa: F401 (a fixture)

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


# -- generated chains: the C reader against parse_args ---------------------------------------------
# nvidia-cdi-hook's args.c and message.c run in the JSON reader's probe (test_json_reader.py), on
# chains drawn from the words both readers know and the values that trip them: the tasks must be the
# same, and so must every warning and error line (cdi.errors.message_line: printable, bounded).

OPTIONS = {"create-symlinks": ["--link", "--container-spec", "--host-root"],
           "update-ldcache": ["--folder", "--ldconfig-path", "--container-spec"],
           "enable-cuda-compat": ["--host-driver-version", "--container-spec"],
           "disable-device-node-modification": ["--params-file", "--container-spec"],
           "update-application-profile": ["--container-spec"]}
assert set(OPTIONS) == set(SUBCOMMANDS)
WORDS = ["hook", "--debug", "-d", "--quiet", "-q", "--", "-", "--unknown", "-x", "newer-subcommand", "create-symlink",
         "--LINK", "--link=", "--folder="]
VALUES = ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "libcuda.so.1::/usr/lib/libcuda.so", "a::b", "::/x", "x::",
          "t::/l::/m", "@/sbin/ldconfig", "@relative", "/sbin/ldconfig.real", "relative", "", "550.54.15", "999",
          "x550", "\u0665", "/spec.json", "/a\nb", "/\x1b[31m", "/\u202eevil", "/caf\u00e9", "/\udcff", "9" * 200,
          "/" + "w" * 300, "a b", "-", "create-symlinks"]


def random_chain(rng) -> list[str]:
    """Subcommands with their options mostly, values as the next word or after "=", and stray words."""
    chain = rng.choice([[], [], ["hook"], [rng.choice(WORDS)]])
    for _ in range(rng.randint(0, 3)):
        subcommand = rng.choice([*SUBCOMMANDS, rng.choice(WORDS)])
        chain.append(subcommand)
        for _ in range(rng.randint(0, 3)):
            roll = rng.random()
            option = rng.choice(OPTIONS.get(subcommand) or ["--x"]) if roll < 0.7 else rng.choice(WORDS)
            value = rng.choice(VALUES)
            chain += [f"{option}={value}"] if rng.random() < 0.3 else [option, value] if rng.random() < 0.9 else [option]
    return chain


def python_reading(args: list[str]) -> tuple[str, str]:
    """(the tasks, stderr) as the probe writes them, from hook.cdi_hook.parse_args and cdi.errors."""
    try:
        tasks = parse_args(args)
    except HookError as e:
        return "", message_line("nvidia-cdi-hook", "error", str(e)) + "\n"
    text = "".join(f"link {target} {link}\n" for target, link in tasks.links)
    text += "".join(f"folder {folder}\n" for folder in tasks.folders)
    text += (f"update_ldcache {int(tasks.update_ldcache)}\nldconfig {tasks.ldconfig}\n"
             f"host_driver_version {tasks.host_driver_version or '-'}\n"
             f"disable_device_node_modification {int(tasks.disable_device_node_modification)}\n"
             f"update_application_profile {int(tasks.update_application_profile)}\n"
             f"params_file {tasks.params_file}\ncontainer_spec {tasks.container_spec or '-'}\n")
    return text, "".join(message_line("nvidia-cdi-hook", "warning", w) + "\n" for w in tasks.warnings)


def test_generated_chains_read_as_parse_args_reads_them(probe):
    rng = random.Random("nvidia-cdi-hook args")
    chains = [random_chain(rng) for _ in range(3000)]
    chains += [[*rng.choice([[], ["hook"]]), *case["args"]] for case in CASES
               if "{" not in json.dumps(case["args"])]   # the table's own chains too
    results = probe.run([("a", b"".join(os.fsencode(arg) + b"\0" for arg in chain)) for chain in chains])
    differ = []
    for chain, (outcome, value) in zip(chains, results):
        got = tuple(part.decode("utf-8", "surrogateescape") for part in value.split(b"\0", 1))
        if outcome != "ok" or got != python_reading(chain):
            differ.append((chain, got, python_reading(chain)))
    assert not differ, differ[:3]
    outcomes = [python_reading(chain) for chain in chains]
    # both outcomes exercised: chains that do something, warnings, errors
    assert sum(bool(t) for t, _ in outcomes) > 300 and sum("warning" in m for _, m in outcomes) > 300
    assert sum("error" in m for _, m in outcomes) > 300

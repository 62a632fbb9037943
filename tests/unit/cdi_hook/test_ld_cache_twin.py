"""The ld cache's folders, held between its two writings (docs/c-twins.md): nvidia-cdi-hook's tasks.c and
the prestart hook's hook.cdi_hook.update_ldcache pick the folders ldconfig scans (the image's CUDA compat
folder first when its libcuda is for a newer driver major, then the asked folders that exist in the root,
without the compat one twice) and say the same warnings, on generated roots: folders present, missing, a
file in their place, a link inside the root or out of it; no /etc; a compat folder with one libcuda, two
or none; any host driver version. Each case is built twice, alike, and run through the real program and
through the Python function, both with a static stand-in for ldconfig that records its argv."""
from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

from cdi.errors import message_line
from hook.cdi_hook import update_ldcache
from libcontainer_c.rootfs import Rootfs
from tests.unit.cdi_hook.test_args_table import COMPAT, HOOK, fake_ldconfig, needs_root  # noqa: F401 (a fixture)

FOLDERS = ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/opt/a", "/opt/b/c", "/lib", COMPAT]
CASES = 120


def build(root: Path, case: dict) -> None:
    """One generated layout (case: what random_case drew), made the same way wherever it is built."""
    root.mkdir(parents=True)
    if case["etc"]:
        (root / "etc").mkdir()
    for folder, kind in case["layout"].items():
        path = root / folder.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind == "dir":
            path.mkdir(exist_ok=True)
        elif kind == "file":
            path.write_bytes(b"")
        elif kind == "link inside":
            path.symlink_to("/usr/lib64")   # resolved in the root: the root's /usr/lib64
        elif kind == "link out":
            path.symlink_to("../../../../../../../nonexistent-outside")
    compat = root / COMPAT.lstrip("/")
    for major in case["compat"]:
        compat.mkdir(parents=True, exist_ok=True)
        (compat / f"libcuda.so.{major}.0").write_bytes(b"")


def random_case(rng: random.Random) -> dict:
    return {"etc": rng.random() < 0.9,
            "layout": {f: rng.choice(["dir", "dir", "missing", "file", "link inside", "link out"])
                       for f in FOLDERS if f != COMPAT},
            "compat": rng.choice([[], [rng.randint(400, 700)], [rng.randint(400, 700)], [510, 560]]),
            "folders": rng.sample(FOLDERS + ["/nowhere"], rng.randint(0, 4)),
            "host_driver_version": rng.choice([None, f"{rng.randint(400, 700)}.54.15", "550", "9" * 25])}


def through_c(root: Path, case: dict, fake: Path, bundle: Path) -> tuple[list[str] | None, list[str]]:
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps({"root": {"path": str(root)}}))
    args = ["update-ldcache", "--ldconfig-path", str(fake)] + [a for f in case["folders"] for a in ("--folder", f)]
    if case["host_driver_version"]:
        args += ["enable-cuda-compat", "--host-driver-version", case["host_driver_version"]]
    result = subprocess.run([str(HOOK), *args], input=json.dumps({"bundle": str(bundle)}), capture_output=True,
                            text=True, cwd="/", env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, timeout=60)
    assert result.returncode == 0, result.stderr
    return ran(root), result.stderr.splitlines()


def through_python(root: Path, case: dict, fake: Path) -> tuple[list[str] | None, list[str]]:
    warnings = []
    with Rootfs(str(root)) as rootfs:
        update_ldcache(rootfs, case["folders"], str(fake), warnings.append, case["host_driver_version"])
    return ran(root), [message_line("nvidia-cdi-hook", "warning", w) for w in warnings]


def ran(root: Path) -> list[str] | None:
    """The folders the stand-in ldconfig got (None: it did not run)."""
    argv = root / "ldconfig-argv"
    return argv.read_text().splitlines()[1:] if argv.exists() else None


@needs_root
def test_generated_roots_give_the_same_folders_to_ldconfig(fake_ldconfig, tmp_path):
    rng = random.Random("ld cache twin")
    differ, compat_first, ran_at_all = [], 0, 0
    for n in range(CASES):
        case = random_case(rng)
        build(tmp_path / f"c{n}", case)
        build(tmp_path / f"p{n}", case)
        c = through_c(tmp_path / f"c{n}", case, fake_ldconfig, tmp_path / f"b{n}")
        python = through_python(tmp_path / f"p{n}", case, fake_ldconfig)
        if c != python:
            differ.append((case, c, python))
        ran_at_all += c[0] is not None
        compat_first += bool(c[0]) and c[0][0] == COMPAT
    assert not differ, differ[:3]
    assert ran_at_all > CASES // 2 and compat_first > 5, (ran_at_all, compat_first)

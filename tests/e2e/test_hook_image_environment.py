"""An image's environment never reaches a root interpreter (the CVE-2025-23266 pattern), end to end.

runc hands an OCI hook without `env` the container's environment when it is a createContainer hook
(and runs it in the container's rootfs as its cwd): an image with `LD_PRELOAD=/proc/self/cwd/x.so`
puts its library into every dynamic program such a hook starts, as root on the host. NVIDIA-style CDI
specs run their hooks as `nvidia-ctk [global options] hook <subcommand> ...` entries without `env`;
every spelling of them must run the hook in C (no dynamic loader, no interpreter). A control entry
(/bin/true) proves the image's library is loaded by a dynamic program the hook entry starts.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil
import subprocess

import pytest

from tests.e2e.bundle import make_bundle
from tests.e2e.host_setup import ensure_hugetlb_on_v1
from tests.e2e.shim_host import NVIDIA_CTK, SHIM, ShimLifecycle, build_gpu_host, shim_env, write_shim_config

pytestmark = pytest.mark.e2e

# Global options before `hook` as specs for one nvidia-ctk or another may spell them.
SPELLINGS = [[], ["--debug"], ["-d"], ["--debug=true"], ["-d=1"], ["-q=true"], ["--quiet=false"], ["-dq"],
             ["--log-level=debug"], ["--log-level", "debug"], ["--", ]]
SUBCOMMANDS = [["update-ldcache", "--folder", "/usr/lib/x86_64-linux-gnu"],
               ["create-symlinks", "--link", "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda-probe.so"],
               ["enable-cuda-compat", "--host-driver-version", "550.54.15"],
               ["disable-device-node-modification"]]
CONTROL = os.path.realpath(shutil.which("true") or "/bin/true")


@pytest.fixture(scope="module")
def gpu_host(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("needs root (device nodes, runc)")
    if not SHIM.exists() or shutil.which("runc") is None:
        pytest.skip("needs the installed shim (make venv) and runc")
    ensure_hugetlb_on_v1()
    return build_gpu_host(tmp_path_factory.mktemp("image-env"))


def image_library(rootfs, marker):
    """/poc.so in the image: its constructor appends the program it was loaded into to marker (on the host)."""
    source = rootfs.parent / "poc.c"
    source.write_text(
        "#include <stdio.h>\n#include <unistd.h>\n"
        "__attribute__((constructor)) static void poc(void) {\n"
        "    char exe[4096] = \"\"; ssize_t n = readlink(\"/proc/self/exe\", exe, sizeof(exe) - 1);\n"
        f"    FILE *f = fopen(\"{marker}\", \"a\");\n"
        "    if (f) { fprintf(f, \"%.*s\\n\", n > 0 ? (int)n : 0, exe); fclose(f); }\n}\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(rootfs / "poc.so"), str(source)], check=True)


def spec_with_hooks(gpu_host, spec_dir, entries):
    """The host's generated spec, with `entries` added as createContainer hooks without env."""
    spec = json.loads((gpu_host.spec_dir / "nvidia.json").read_text())
    edits = spec.setdefault("containerEdits", {})
    edits["hooks"] = [*copy.deepcopy(edits.get("hooks", [])),
                      *({"hookName": "createContainer", "path": path, "args": args} for path, args in entries)]
    spec_dir.mkdir()
    (spec_dir / "nvidia.json").write_text(json.dumps(spec))
    return dataclasses.replace(gpu_host, spec_dir=spec_dir)


def test_no_spelling_of_nvidia_ctk_hook_runs_the_images_ld_preload(gpu_host, tmp_path):
    marker = tmp_path / "ran-as-root-on-the-host"
    ctk = str(NVIDIA_CTK)
    entries = [(CONTROL, ["true"])] + [(ctk, ["nvidia-ctk", *spelling, "hook", *sub])
                                       for spelling in SPELLINGS for sub in SUBCOMMANDS]
    host = spec_with_hooks(gpu_host, tmp_path / "cdi", entries)
    bundle = make_bundle(tmp_path / "bundle", ["sh", "-c", "echo started; ls /usr/lib/x86_64-linux-gnu"],
                         env=["NVIDIA_VISIBLE_DEVICES=0", "LD_PRELOAD=/proc/self/cwd/poc.so"], glibc=True)
    image_library(bundle / "rootfs", marker)
    config = write_shim_config(tmp_path / "config.toml", host, runtime="runc", mode="cdi")
    code, output, stderr = ShimLifecycle(shim_env(config, tmp_path / "cache"), tmp_path / "state").run(bundle)

    # the control entry loaded the image's library (the hooks got the image's environment); nothing else did
    assert marker.read_text().splitlines() == [CONTROL]
    assert code == 0, stderr
    assert output.splitlines()[0] == "started"
    assert "libcuda-probe.so" in output.split()   # the create-symlinks entries ran

"""The driver's files as one prepared directory mounted once, against one bind mount per file (issue 25;
docs/driver-dir.md has the design this measures). Runc alone, no shim: each row is runc's lifecycle
(create/start/wait/delete of `true`) on a variant of the config.json the shim writes in cdi mode for
GPU 0 of a simulated host (nvidia-container-runtime.cdi, run once, untimed):

  - plain: the same config.json without any GPU edit (the floor);
  - files: the edits as generated: one read-only bind mount per driver file (libraries, binaries,
    firmware), the persistenced socket, the device nodes and the nvidia-cdi-hook entry;
  - files, no rprivate: the same without the `rprivate` of each bind mount (one mount call less each);
  - dir + links: the driver's files (not the socket) as one directory mounted at DRIVER_DIR, and a
    link at each file's usual path into it, made by the hook's create-symlinks with the links it
    makes today (the libraries' and binaries' paths stay what they are, as links);
  - dir + soname links: the dir, and links only at the names the hook links today (the sonames and
    dev names) and the binaries' usual paths: no file at a library's full versioned name;
  - dir, ld cache only: the dir, no link anywhere, the hook's ld cache naming DRIVER_DIR/lib64;
  - the same with the dir at /usr/local/nvidia, where CUDA images' PATH and LD_LIBRARY_PATH look.

The prepared dir is made before the run, in the bench's scratch dir: hard links to the driver root's
files (copies where they are on another file system), with the sonames' links inside it, as a host
would keep it ready; a tmpfs of read-only bind mounts of each file measured the same (docs/driver-dir.md)
but leaves the container one mount per file (submounts of the rbind), so the bench uses the links.

Every row runs on a fresh rootfs (a new bundle dir and a new copy of the image each run, untimed:
bench.fresh_host) and on a reused one, round-robin; paired ratios are to the `files` row (what is done
today). Before timing, each variant runs once on each of three images with a script that prints what
the container sees: its number of mounts, where a glibc program's dlopen("libnvidia-ml.so.1") found
the library and whether nvmlInit worked and where dlopen("libcuda.so.1") found that one (nvml-probe,
built here; not in the busybox image), and where nvidia-smi is found and whether it runs. The third
image is the glibc one as a CUDA image with forward-compat libraries: a newer libcuda in
/usr/local/cuda/compat, and the PATH and LD_LIBRARY_PATH CUDA images set (which name /usr/local/nvidia).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from functools import partial
from pathlib import Path

from bench.cdi_hook import SUBCOMMANDS, _steps
from bench.fresh_host import FreshHost, fresh_copy, runtime_env
from bench.gpu_lifecycle import GPU_ENV, SHIM, Row, _bundle, _edited, _simulated_host
from bench.harness import load_line, report, time_rounds, wait_until_settled
from simulator.native_build import compiler
from tests.e2e.rootfs import make_rootfs

# where the variants mount the driver dir: a path no image has and no image's environment names
DRIVER_DIR = "/usr/local/nvidia-driver"
# CUDA images set LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64 and put /usr/local/nvidia/bin
# on PATH (nvidia-docker 1's driver volume; none of them has that dir): mounted there, the driver is
# found without links or ld cache, but LD_LIBRARY_PATH then puts its libcuda before the image's
# forward-compat one (one more variant shows it)
CUDA_IMAGE_DIR = "/usr/local/nvidia"
CUDA_IMAGE_ENV = ["PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
                  "/sbin:/bin", "LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64"]
# the cuda image's forward-compat libcuda: for a driver newer than any host's (the hook's
# enable-cuda-compat then puts /usr/local/cuda/compat first in the ld cache)
COMPAT_LIBCUDA = "usr/local/cuda/compat/libcuda.so.999.1.1"
BIN_DIR = "/usr/bin"
FIRMWARE_PREFIX = "/lib/firmware/nvidia/"
CHECK = ("echo mounts $(wc -l < /proc/self/mountinfo); "
         "echo nvml $(if command -v nvml-probe >/dev/null; then nvml-probe 2>&1; else echo no-glibc-probe; fi); "
         "echo libcuda $(if command -v nvml-probe >/dev/null; then nvml-probe libcuda.so.1 2>&1; else echo -; fi); "
         "echo nvidia-smi $(command -v nvidia-smi || echo not-in-PATH); "
         "echo runs $(nvidia-smi -L >/dev/null 2>&1 && echo yes || "
         "(for d in /usr/local/nvidia-driver/bin /usr/local/nvidia/bin; do $d/nvidia-smi -L >/dev/null 2>&1 && "
         "echo only-as-$d/nvidia-smi && break; done || echo no))")
# a glibc program that loads libnvidia-ml.so.1 by its soname as NVML's clients do, and says from where
# (with an argument: loads that soname and says from where)
PROBE_SOURCE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
int main(int argc, char **argv)
{
    const char *name = argc > 1 ? argv[1] : "libnvidia-ml.so.1";
    void *lib = dlopen(name, RTLD_NOW);
    struct link_map *map = NULL;
    unsigned int gpus = 0;
    if (!lib || dlinfo(lib, RTLD_DI_LINKMAP, &map) != 0) {
        printf("%s-not-found\n", name);
        return 1;
    }
    if (argc > 1) {     /* another library: only where it was found */
        printf("%s\n", map->l_name);
        return 0;
    }
    int (*init)(void) = (int (*)(void))dlsym(lib, "nvmlInit_v2");
    int (*count)(unsigned int *) = (int (*)(unsigned int *))dlsym(lib, "nvmlDeviceGetCount_v2");
    int rc = init && count ? init() : -1;
    if (rc == 0)
        count(&gpus);
    printf("%s:nvmlInit=%d:gpus=%u\n", map->l_name, rc, gpus);
    return rc != 0;
}
"""


def hook_parts(config: dict) -> tuple[dict, list[tuple[str, str]], list[str], list[str]]:
    """The edits' one createRuntime entry, its create-symlinks links (target, link), the rest of its
    chain (enable-cuda-compat onwards) and its ld cache folders."""
    (entry,) = config["hooks"]["createRuntime"]
    chain = entry["args"][1:]
    link_args = _steps(chain, {"create-symlinks"})
    links = [tuple(link_args[i + 1].split("::", 1)) for i in range(len(link_args) - 1) if link_args[i] == "--link"]
    rest = _steps(chain, set(SUBCOMMANDS) - {"create-symlinks"})
    folders = [rest[i + 1] for i in range(len(rest) - 1) if rest[i] == "--folder"]
    return entry, links, rest, folders


def driver_file_place(destination: str, lib_folders: list[str]) -> str | None:
    """The subdir of the driver dir that takes the file mounted at destination, or None (it stays a mount)."""
    parent, _, name = destination.rpartition("/")
    if parent in lib_folders:
        return f"lib64/{name}"
    if parent == BIN_DIR:
        return f"bin/{name}"
    if destination.startswith(FIRMWARE_PREFIX):
        return f"firmware/{name}"
    return None


def prepare_driver_dir(edits: dict, out: Path) -> None:
    """out: every driver file the edits mount, hard linked (or copied) into lib64/, bin/ and firmware/,
    and the links the hook makes in the library folder made ahead in lib64/."""
    _, links, _, folders = hook_parts(edits)
    for mount in edits["mounts"]:
        place = driver_file_place(mount["destination"], folders)
        if place is None or "bind" not in mount.get("options", []):
            continue
        target = out / place
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(mount["source"], target)
        except OSError:
            shutil.copy2(mount["source"], target)
    for text, link in links:
        for folder in folders:
            if link.startswith(folder + "/"):
                path = out / "lib64" / link[len(folder) + 1:]
                path.parent.mkdir(parents=True, exist_ok=True)
                os.symlink(text, path)


def variants(plain: dict, edits: dict, driver_dir: Path) -> dict[str, dict]:
    """The configs timed, by row label (see the module docstring)."""
    at_cuda_dir = _variants(plain, edits, driver_dir, CUDA_IMAGE_DIR)["dir, ld cache only"]
    return {**_variants(plain, edits, driver_dir, DRIVER_DIR), f"dir at {CUDA_IMAGE_DIR}, ld cache only": at_cuda_dir}


def _variants(plain: dict, edits: dict, driver_dir: Path, at: str) -> dict[str, dict]:
    entry, links, rest, folders = hook_parts(edits)
    file_mounts = [m for m in edits["mounts"]
                   if "bind" in m.get("options", []) and driver_file_place(m["destination"], folders)]
    others = [m for m in edits["mounts"] if m not in file_mounts]
    dir_mount = {"destination": at, "source": str(driver_dir),
                 "options": ["ro", "nosuid", "nodev", "rbind", "rprivate"]}

    def edited(mounts: list[dict], args: list[str]) -> dict:
        config = json.loads(json.dumps(edits))
        config["mounts"] = mounts
        config["hooks"] = {"createRuntime": [{**entry, "args": args}]}
        return config

    no_rprivate = json.loads(json.dumps(edits))
    for mount in no_rprivate["mounts"]:
        if "options" in mount and "bind" in mount["options"]:
            mount["options"] = [o for o in mount["options"] if o != "rprivate"]
    into_dir = {m["destination"]: f"{at}/{driver_file_place(m['destination'], folders)}" for m in file_mounts}
    every_link = [f"{into_dir[d]}::{d}" for d in into_dir] + [f"{t}::{l}" for t, l in links]
    soname_links = [f"{into_dir[d]}::{d}" for d in into_dir if d.startswith(BIN_DIR + "/")]
    for _, link in links:
        folder = next(f for f in folders if link.startswith(f + "/"))
        soname_links.append(f"{at}/lib64/{link[len(folder) + 1:]}::{link}")
    dir_rest = []
    for i, arg in enumerate(rest):
        dir_rest.append(f"{at}/lib64" if i and rest[i - 1] == "--folder" else arg)

    def link_args(specs: list[str]) -> list[str]:
        return [entry["args"][0], "create-symlinks"] + [a for spec in specs for a in ("--link", spec)] + rest

    return {"plain (no GPU edits)": plain,
            "files (as generated)": edits,
            "files, no rprivate": no_rprivate,
            "dir + links at every usual path": edited(others + [dir_mount], link_args(every_link)),
            "dir + soname and binary links": edited(others + [dir_mount], link_args(soname_links)),
            "dir, ld cache only": edited(others + [dir_mount], [entry["args"][0], *dir_rest])}


def cuda_like_image(glibc_image: Path, driver_root: Path, out: Path) -> Path:
    """A copy of glibc_image with a CUDA image's compat folder: the simulated libcuda (its soname is
    libcuda.so.1) as COMPAT_LIBCUDA. Run with CUDA_IMAGE_ENV."""
    shutil.copytree(glibc_image, out, symlinks=True)
    compat = out / COMPAT_LIBCUDA
    compat.parent.mkdir(parents=True)
    (library,) = driver_root.glob("usr/lib/x86_64-linux-gnu/libcuda.so.*.*")
    shutil.copyfile(library, compat)
    return out


def seen(config: dict, image: Path, scratch: Path, env: list[str] = ()) -> str:
    """What a container of config (env added to its process's) on a fresh copy of image sees (CHECK's
    output on one line). The bundle is left in scratch, removed with it at the end of the run: inodes
    freed now would slow every inode the timed runs make (bench.fresh_host's docstring)."""
    bundle = Path(tempfile.mkdtemp(prefix="seen-", dir=scratch))
    fresh_copy(image, bundle / "rootfs")
    config = json.loads(json.dumps(config))
    config["process"]["args"] = ["sh", "-c", CHECK]
    names = {e.split("=", 1)[0] for e in env}
    config["process"]["env"] = [e for e in config["process"]["env"] if e.split("=", 1)[0] not in names] + list(env)
    (bundle / "config.json").write_text(json.dumps(config))
    done = subprocess.run(["runc", "--root", str(scratch / "seen-state"), "run", "--bundle", str(bundle),
                           "bench-driver-dir-seen"], capture_output=True, text=True, env=runtime_env(),
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise RuntimeError(f"runc run failed ({done.returncode}): {done.stderr.strip()}")
    return ", ".join(done.stdout.split("\n")).strip(", ")


def add_probe(image: Path, scratch: Path) -> None:
    """PROBE_SOURCE built (dynamically linked, against the host's glibc, which the image holds) as
    image's /usr/bin/nvml-probe."""
    source = scratch / "nvml-probe.c"
    source.write_text(PROBE_SOURCE)
    subprocess.run([compiler(), "-O2", "-o", str(image / "usr/bin/nvml-probe"), str(source), "-ldl"], check=True,
                   capture_output=True)


def run(runs: int) -> str:
    load_before = load_line("before")
    with tempfile.TemporaryDirectory(prefix="bench-driver-dir-") as tmp:
        workdir = Path(tmp)
        driver_root = _simulated_host(workdir)
        image = make_rootfs(workdir / "image-glibc", glibc=True)
        add_probe(image, workdir)
        busybox = make_rootfs(workdir / "image-busybox")
        edits_row = Row("edits", "edits", "auto", ["runc"], _bundle(workdir / "edits", image, GPU_ENV), None,
                        runtime_env(), image)
        plain = json.loads((edits_row.bundle / "config.json").read_text())
        pristine = workdir / "gpu-config.json"
        pristine.write_text(json.dumps(plain))
        host = FreshHost("driver-dir", workdir, driver_root)
        try:
            wait_until_settled(host.ready_at)
            edits = _edited(host, edits_row, [SHIM + ".cdi"], pristine)
            if edits == plain:
                raise RuntimeError("nvidia-container-runtime.cdi did not edit config.json")
            driver_dir = workdir / "driver-dir"
            prepare_driver_dir(edits, driver_dir)
            configs = variants(plain, edits, driver_dir)
            images = (("glibc", image, []), ("busybox", busybox, []),
                      ("cuda-like", cuda_like_image(image, driver_root, workdir / "image-cuda"), CUDA_IMAGE_ENV))
            lines = [f"{label}, {name}: {seen(config, rootfs, workdir, env)}" for label, config in configs.items()
                     for name, rootfs, env in images]
            rows = []
            for fresh in (True, False):
                for n, (label, config) in enumerate(configs.items()):
                    path = workdir / f"config-{n}.json"
                    path.write_text(json.dumps(config))
                    bundle = workdir / f"bundle-{n}-{'fresh' if fresh else 'reused'}"
                    shutil.copytree(edits_row.bundle, bundle, symlinks=True)
                    if not fresh:   # a rootfs this variant has run on (a restarted container)
                        host.lifecycle(["runc"], bundle, path, runtime_env())
                    rows.append(((label if fresh else f"restart: {label}"),
                                 partial(host.lifecycle, ["runc"], bundle, path, runtime_env(), image if fresh else None)))
            timed = time_rounds(rows, runs)
        finally:
            host.close()
    half = len(timed) // 2
    return "\n".join(
        ["== what a container sees (one run of each, fresh rootfs; glibc: busybox with glibc, ldconfig and "
          "nvml-probe; busybox: static busybox alone; cuda-like: glibc with a newer compat libcuda in "
          "/usr/local/cuda/compat and a CUDA image's PATH and LD_LIBRARY_PATH)", *lines,
         report("runc alone on each variant, fresh rootfs (a new bundle dir and image copy each run, untimed); "
                "paired: the median of each round's ratio to the round's `files` row", timed[:half], timed[1],
                with_paired=True),
         report("the same on a reused rootfs (a restart), in the same rounds", timed[half:], timed[half + 1],
                with_paired=True),
         load_before, load_line("after")])

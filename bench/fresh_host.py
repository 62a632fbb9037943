"""A simulated GPU host as a fresh install leaves it, in a private mount namespace, timing lifecycles.

On a fresh install nothing names the config or the caches: the programs read
/etc/nvidia-container-runtime/config.toml (the packaged file, with the driver root set), keep their
caches in /run/nvidia-container-toolkit, and cdi mode finds the spec nvidia-cdi-refresh wrote,
/var/run/cdi/nvidia.yaml. The benchmarks must run that path (with NVIDIA_CTK_CONFIG_FILE_PATH and no
NVIDIA_CTK_CACHE_DIR the config is not cached at all: cdi.config_cache), yet write nothing to this
machine's /etc or /run. So a worker process (`python -m bench.fresh_host`, started by FreshHost under
`unshare --mount --propagation private`) builds that host in its own mount namespace:

  - an overlay on /etc and on /run whose upper layers are in a tmpfs: the mount points below are made
    there, and whatever else is written to /etc or /run during the run lands there too;
  - a tmpfs on /etc/nvidia-container-runtime holding config.toml (packaging/config/config.toml with
    `root` set, and `mode` when asked), one on /run/nvidia-container-toolkit (mode 0755: the caches
    trust only a directory no one else can write), one on /run/cdi for the spec, and an empty one on
    /etc/cdi if the machine has that directory (its specs would otherwise be read too);
  - the spec written as nvidia-cdi-refresh writes it: `nvidia-ctk cdi generate --output=...`, the
    driver root taken from the config.

Every mount is private to the namespace and goes with it when the worker exits. The worker then
reads one JSON request a line on stdin ({"runtime": [...], "bundle": dir, "config": file to restore
config.json from or null, "env": {...}, "rootfs": a pristine rootfs dir or null}), runs that lifecycle
(bench.harness.lifecycle) and answers {"seconds": s} or {"error": "..."} on stdout. With "rootfs" the
run gets a new bundle directory beside the row's (`<bundle>.run-<n>`: the row's config.json and a new
copy of that rootfs dir, made outside the timing, the config.json the run left copied back to the
row's bundle): the container starts on a rootfs nothing has run on yet, as every `docker run`, `podman
run` and pod does. A new directory each run and not the row's own one rewritten: with each row's dir
rewritten (its old copy removed just before the run), five rows on one config.json spread 70-106 ms
median for a whole run on a quiet machine; on a new dir each run they agreed within 10%. The run dirs are removed
when the worker ends, not after each run: on a file system without a journal (the ext4 of the VMs these
figures come from) the kernel does not reuse an inode freed less than 60 s ago (300 s while its inode
table block is dirty) and skips those one by one for every new inode (ext4's recently_deleted()), so
removing each run's copy (~300 inodes) made every file, link and mount target made by the next runs
cost a scan past thousands of freed inodes: the GPU rows, which make ~70 of them, paid it most.
Without "rootfs" the bundle's rootfs is reused, as a restarted container's is.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGED_CONFIG = REPO / "packaging" / "config" / "config.toml"
CONFIG_DIR = "/etc/nvidia-container-runtime"
CACHE_DIR = "/run/nvidia-container-toolkit"
SPEC_FILE = "/run/cdi/nvidia.yaml"   # nvidia-cdi-refresh's default (/var/run is /run)
OTHER_SPEC_DIR = "/etc/cdi"          # the other default spec dir
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# what would move the programs off the fresh-install path
UNSET = ("NVIDIA_CTK_CONFIG_FILE_PATH", "NVIDIA_CTK_CACHE_DIR", "XDG_CONFIG_HOME", "NVIDIA_CTK_DRIVER_ROOT",
         "NVIDIA_CTK_CDI_CACHE_FILE")
# the mount points of a worker's namespace
MOUNT_POINTS = ("/etc", "/run", CONFIG_DIR, OTHER_SPEC_DIR, os.path.dirname(SPEC_FILE), CACHE_DIR)


def packaged_config(driver_root: Path, mode: str | None = None) -> str:
    """The packaged config.toml with [nvidia-container-cli] root (and nvidia-container-runtime.mode) set."""
    text = PACKAGED_CONFIG.read_text()
    settings = {'#root = ""': f'root = "{driver_root}"'}
    if mode:
        settings['#mode = "auto"'] = f'mode = "{mode}"'
    for default, value in settings.items():
        if text.count(default + "\n") != 1:
            raise RuntimeError(f"{PACKAGED_CONFIG}: expected one line {default!r}")
        text = text.replace(default + "\n", value + "\n")
    return text


def traces() -> list[str]:
    """What a worker's host makes that would be on this machine, had a mount leaked: the dirs it mounts
    on (not /run/cdi: other programs use it), the config, the spec and the caches of the system config
    (named by its path; other files there are not ours to judge)."""
    from runtime_shim.runtime_cache import DEFAULT_CONFIG, fnv1a64

    key = f"{fnv1a64(DEFAULT_CONFIG):016x}"
    return [CONFIG_DIR, OTHER_SPEC_DIR, CACHE_DIR, DEFAULT_CONFIG, SPEC_FILE, f"{CACHE_DIR}/runtime-{key}.cache",
            f"{CACHE_DIR}/config-{key}.json"]


def machine_state(workdir: Path) -> dict:
    """What a run must leave as it found it: traces() (a file's identity, a dir's presence, or None)
    and the mounts on MOUNT_POINTS or under workdir (the workers' scratch dirs), as this namespace sees them."""
    state = {}
    for path in traces():
        try:
            st = os.stat(path)
            # a dir: only whether it is there (others may write in it meanwhile)
            identity = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            state[path] = True if stat.S_ISDIR(st.st_mode) else identity
        except FileNotFoundError:
            state[path] = None
    with open("/proc/self/mountinfo") as mountinfo:
        points = [line.split()[4] for line in mountinfo]
    state["mounts"] = sorted(p for p in points if p in MOUNT_POINTS or p.startswith(f"{workdir}/"))
    return state


def runtime_env() -> dict[str, str]:
    """The environment every timed call gets: PATH (the system dirs) and nothing of UNSET."""
    return {"PATH": SYSTEM_PATH}


def _mount(*args: str) -> None:
    subprocess.run(["mount", "-n", *args], check=True, capture_output=True, text=True)


def build(scratch: Path, config_text: str) -> None:
    """Make this (private) mount namespace's /etc and /run those of a fresh install; scratch is an empty dir."""
    _mount("-t", "tmpfs", "-o", "mode=0700", "tmpfs", str(scratch))
    for top in ("/etc", "/run"):
        upper, work = scratch / top.strip("/") / "upper", scratch / top.strip("/") / "work"
        upper.mkdir(parents=True)
        work.mkdir()
        _mount("-t", "overlay", "overlay", "-o", f"lowerdir={top},upperdir={upper},workdir={work}", top)
    tmpfs_dirs = [CONFIG_DIR, CACHE_DIR, os.path.dirname(SPEC_FILE)]
    if os.path.isdir(OTHER_SPEC_DIR):
        tmpfs_dirs.append(OTHER_SPEC_DIR)
    for directory in tmpfs_dirs:
        os.makedirs(directory, exist_ok=True)
        _mount("-t", "tmpfs", "-o", "mode=0755", "tmpfs", directory)
    config = Path(CONFIG_DIR, "config.toml")
    config.write_text(config_text)
    os.chmod(config, 0o644)
    ctk = Path(sys.executable).parent / "nvidia-ctk"
    generated = subprocess.run([str(ctk), "cdi", "generate", f"--output={SPEC_FILE}"], env=runtime_env(),
                               capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if generated.returncode != 0:
        raise RuntimeError(f"nvidia-ctk cdi generate failed: {generated.stderr.strip()}")


def fresh_copy(pristine: Path, rootfs: Path) -> None:
    """rootfs replaced by a copy of pristine (cp -a: modes, owners, links and times as they are), written
    out to disk before the run: an engine's image was unpacked when it was pulled, not just before the
    container starts, and the copy's dirty pages would otherwise be flushed by the first fsync of the
    run (the shim's of config.json, on the same file system: ~20-50 ms on this machine's disk)."""
    if rootfs.exists():
        shutil.rmtree(rootfs)
    subprocess.run(["cp", "-a", str(pristine), str(rootfs)], check=True, capture_output=True)
    fd = os.open(rootfs, os.O_RDONLY | os.O_DIRECTORY)
    try:
        _syncfs(fd)
    finally:
        os.close(fd)


def _syncfs(fd: int) -> None:
    """syncfs(2): the file system holding fd written out (os.sync would wait for every other one too)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syncfs(fd) != 0:
        raise OSError(ctypes.get_errno(), "syncfs")


def serve(scratch: Path, config_text: str, state_root: Path) -> int:
    from bench.harness import lifecycle, set_child_subreaper

    try:
        build(scratch, config_text)
        set_child_subreaper()
    except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", "") or ""
        print(json.dumps({"error": f"{exc} {detail}".strip()}), flush=True)
        return 1
    print(json.dumps({"ready": True}), flush=True)
    restore_cache: dict[str, bytes] = {}
    finished: list[Path] = []
    for line in sys.stdin:
        request = json.loads(line)
        bundle = Path(request["bundle"])
        try:
            if request.get("config"):
                if request["config"] not in restore_cache:
                    restore_cache[request["config"]] = Path(request["config"]).read_bytes()
                (bundle / "config.json").write_bytes(restore_cache[request["config"]])
            if request.get("rootfs"):
                answer = {"seconds": _on_new_bundle(request, bundle, state_root, finished)}
            else:
                answer = {"seconds": lifecycle(request["runtime"], bundle, state_root, request["env"])}
        except (OSError, RuntimeError) as exc:
            answer = {"error": str(exc)}
        print(json.dumps(answer), flush=True)
    for run in finished:
        shutil.rmtree(run, ignore_errors=True)
    return 0


def _on_new_bundle(request: dict, bundle: Path, state_root: Path, finished: list[Path]) -> float:
    """One lifecycle in a new bundle dir beside bundle: its config.json and a new copy of the request's
    rootfs (not timed); the config.json the run left is copied back to bundle, and the dir is added to
    finished, removed when the worker ends (see the module docstring: not between runs)."""
    from bench.harness import lifecycle

    global _runs
    _runs += 1
    run = bundle.with_name(f"{bundle.name}.run-{_runs}")
    run.mkdir()
    try:
        shutil.copyfile(bundle / "config.json", run / "config.json")
        fresh_copy(Path(request["rootfs"]), run / "rootfs")
        seconds = lifecycle(request["runtime"], run, state_root, request["env"])
        shutil.copyfile(run / "config.json", bundle / "config.json")
    except BaseException:
        shutil.rmtree(run)
        raise
    finished.append(run)
    return seconds


_runs = 0


class FreshHost:
    """A worker in its own mount namespace with a fresh install's /etc and /run (see the module docstring)."""

    def __init__(self, name: str, workdir: Path, driver_root: Path, mode: str | None = None):
        self.name = name
        scratch, state = workdir / f"ns-{name}", workdir / f"state-{name}"
        scratch.mkdir()
        state.mkdir()
        env = {k: v for k, v in os.environ.items() if k not in UNSET}
        self.process = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", sys.executable, "-m", "bench.fresh_host",
             str(scratch), str(state)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO, env=env)
        self.process.stdin.write(json.dumps(packaged_config(driver_root, mode)) + "\n")
        self.process.stdin.flush()
        self._answer()  # ready, or the setup's error
        self.ready_at = time.time_ns()

    def _answer(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.name} host's worker ended (exit {self.process.wait()})")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"{self.name} host: {answer['error']}")
        return answer

    def lifecycle(self, runtime: list[str], bundle: Path, config: Path | None, env: dict[str, str],
                  rootfs: Path | None = None) -> float:
        """Seconds for one create/start/wait/delete, config.json first restored from config when given and
        the bundle's rootfs replaced by a new copy of rootfs when given (neither timed)."""
        request = {"runtime": runtime, "bundle": str(bundle), "config": str(config) if config else None,
                   "env": env, "rootfs": str(rootfs) if rootfs else None}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return self._answer()["seconds"]

    def has_create_entry(self, mode: str) -> bool:
        """Whether the worker's cache dir (seen through /proc/PID/root, in its mount namespace) holds a
        create cache entry of mode (runtime_shim.create_cache)."""
        cache_dir = Path(f"/proc/{self.process.pid}/root{CACHE_DIR}")
        return any(f"\nmode {mode}\n" in p.read_text(errors="replace") for p in cache_dir.glob("create-*.cache"))

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait(timeout=60)


if __name__ == "__main__":
    # python -m bench.fresh_host SCRATCH STATE_ROOT, the config text as the first line of stdin (JSON)
    sys.exit(serve(Path(sys.argv[1]), json.loads(sys.stdin.readline()), Path(sys.argv[2])))

"""Mount namespaces for tests, so nothing a test mounts reaches the machine's mount table.

- `run_in_private_mount_ns(func)`: run test code in a forked child inside its own private mount
  namespace; whatever it mounts dies with the child, even when an assertion fails half-way. The
  child's return value or exception comes back to the parent (pickled) and is returned or re-raised.
- `cover_with_tmpfs(target)`: a fresh tmpfs on target (/tmp, /run) in such a namespace, with this
  checkout and the interpreter's environment bound back when they lie below target, so that the
  suite runs from a checkout anywhere; `private_run()`: a preexec_fn giving a daemon its own /run.
- `dev_with_extra_nodes(nodes)`: (in such a namespace) a /dev that also has a simulated host's nodes.
- `own_dir_at(path)`: (in such a namespace) path is a dir of the namespace's own, also where the
  machine has none (/etc/cdi, /var/lib/containers), without making anything on the machine.
- `namespace_holder(setup, *args)`: a process holding a private mount namespace that setup prepared;
  run programs in it with `in_namespace(holder, argv)` (an engine with no daemon: podman).
- `in_user_namespace(script, uid, gid)`: `sh -c script` as root of a user namespace of its own whose
  ids are the host's uid.., gid.. (a container's init under a userns-remapped engine).
- `process_in_mount_ns()`: a stand-in container, a `sleep` in its own mount namespace (optionally with
  a procfs and bind mounts made inside), killed on exit.
- snapshots to compare before/after: `mountinfo_lines`, `mounts_under`, `tree_listing`.
"""
import contextlib
import ctypes
import json
import os
import pickle
import subprocess
import sys
import traceback
from pathlib import Path

CLONE_NEWNS = 0x00020000
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18

_libc = ctypes.CDLL(None, use_errno=True)


def enter_private_mount_ns() -> None:
    """unshare(CLONE_NEWNS) and make every mount rprivate (this process only; call in a child)."""
    if _libc.unshare(CLONE_NEWNS) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), "unshare(CLONE_NEWNS)")
    if _libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), "mount --make-rprivate /")


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    if _libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                   data.encode() if data else None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), f"mount {source} on {target}")


def bind_mount(source: str, target: str) -> None:
    """mount --bind source target, by the system call: a /proc/self/fd/N source stays the file it was
    opened as (the mount program canonicalizes it to a path, which may name something else by then)."""
    _mount(source, target, None, MS_BIND, None)


def needed_paths() -> list[str]:
    """What the tests run from and must keep seeing: this checkout (tests, launchers, the project) and
    the interpreter's environment (the venv, the Python it was made from)."""
    checkout = Path(__file__).resolve().parents[2]
    return [str(checkout), os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix)]


def _below(path: str, directory: str) -> bool:
    return path.startswith(directory.rstrip("/") + "/")


def cover_with_tmpfs(target: str, name: str, mode: str = "0755", keep=None) -> list[str]:
    """Mount an empty tmpfs (source `name`) on target in this process' private mount namespace; each
    path of keep (default: needed_paths()) that lies below target is bound back at its place, so a
    checkout or venv under /tmp or /run does not disappear. Returns the paths bound back (a walk of
    target should skip them)."""
    target = os.path.realpath(target)
    kept = sorted({p for p in (keep if keep is not None else needed_paths()) if _below(p, target)})
    kept = [p for p in kept if not any(_below(p, other) for other in kept)]   # the outermost of nested ones
    held = [os.open(p, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) for p in kept]
    try:
        _mount(name, target, "tmpfs", 0, f"mode={mode}")
        for path, fd in zip(kept, held):
            os.makedirs(path)
            _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC, None)
    finally:
        for fd in held:
            os.close(fd)
    return kept


def _tmpfs_holding_entries_of(directory: str, name: str) -> None:
    """In this process' private mount namespace: a tmpfs (source `name`, the directory's mode) on
    directory, holding the directory's present entries bound back (links copied). What is there stays
    visible and writable; what is made at the top of it is new, of this namespace only."""
    held = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        old = f"/proc/self/fd/{held}"
        names = os.listdir(old)
        _mount(name, directory, "tmpfs", 0, f"mode={os.stat(old).st_mode & 0o7777:o}")
        for entry in names:
            source, target = f"{old}/{entry}", f"{directory}/{entry}"
            if os.path.islink(source):
                os.symlink(os.readlink(source), target)
                continue
            if os.path.isdir(source):
                os.mkdir(target)
            else:
                open(target, "x").close()
            _mount(source, target, None, MS_BIND | MS_REC, None)
    finally:
        os.close(held)


def dev_with_extra_nodes(nodes: dict[str, str]) -> None:
    """In this process' private mount namespace: /dev becomes a tmpfs holding the machine's /dev
    entries (bound back; links copied) and each name of nodes (a device node of a simulated host,
    bound from its path there), as on a host whose driver made its nodes in /dev. Nothing is created
    in the machine's /dev."""
    _tmpfs_holding_entries_of("/dev", "gct-dev")
    for name, source in nodes.items():
        os.makedirs(os.path.dirname(f"/dev/{name}"), exist_ok=True)
        open(f"/dev/{name}", "x").close()
        _mount(source, f"/dev/{name}", None, MS_BIND, None)


def own_dir_at(path: str, name: str, source: str | None = None, mode: str = "0755") -> list[str]:
    """In this process' private mount namespace: path becomes a directory of this namespace's own,
    source bound there or (source None) an empty tmpfs (cover_with_tmpfs: the checkout stays). Nothing
    is made on the machine: when path does not exist, its deepest existing parent becomes a tmpfs
    holding that parent's entries bound back (_tmpfs_holding_entries_of) and path is made in there.
    Returns the directories new in this namespace whose tops are empty of the machine's files: path,
    and that parent when there was one (a watch on their tops sees everything made there)."""
    new = []
    parent = path
    while not os.path.isdir(parent):
        parent = os.path.dirname(parent)
    if parent != path:
        _tmpfs_holding_entries_of(parent, name)
        os.makedirs(path)
        new.append(parent)
    if source is None:
        cover_with_tmpfs(path, name, mode)
    else:
        _mount(source, path, None, MS_BIND | MS_REC, None)
    return [path, *new]


def private_run() -> None:
    """A subprocess' preexec_fn: its own mount namespace with an empty /run, so that what a daemon (and
    the shims and runtimes it starts) writes there at fixed paths (/run/docker/plugins, containerd's
    /run/containerd/s, runc's /run/containerd/runc) never reaches the machine's /run, and goes when the
    last process of the namespace ends."""
    enter_private_mount_ns()
    cover_with_tmpfs("/run", "gct-private-run")


# The holder enters its namespace, lets setup prepare it, says so, and keeps it until its stdin closes
# (the test ends it, or dies: no holder outlives its test run).
_HOLDER = """
import importlib, json, sys
sys.path.insert(0, sys.argv[1])
from tests.support.mountns import enter_private_mount_ns
enter_private_mount_ns()
module, function = sys.argv[2].split(":")
prepared = getattr(importlib.import_module(module), function)(*sys.argv[3:])
print("ready", json.dumps(prepared), flush=True)
sys.stdin.read()
"""


def namespace_holder(setup: str, *args: str) -> subprocess.Popen:
    """A process holding a private mount namespace of its own that setup ("module:function", called
    there with args) prepared; what setup returned (JSON) is its `prepared`. Programs run in it through
    in_namespace(); stop_holder() ends it."""
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, needed_paths()[0], setup, *args], text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    said = holder.stdout.readline()
    if not said.startswith("ready "):
        holder.stdin.close()
        why = holder.stderr.read().strip()
        stop_holder(holder)
        raise RuntimeError(f"no private mount namespace from {setup}: {why}")
    holder.prepared = json.loads(said[len("ready "):])
    return holder


def in_namespace(holder: subprocess.Popen, argv: list[str]) -> list[str]:
    """argv run in the mount namespace of holder (in its / : give paths whole)."""
    return ["nsenter", f"--target={holder.pid}", "--mount", "--", *argv]


def stop_holder(holder: subprocess.Popen) -> None:
    """End holder; its namespace goes with the last process in it."""
    if not holder.stdin.closed:
        holder.stdin.close()
    try:
        holder.wait(timeout=10)
    except subprocess.TimeoutExpired:
        holder.kill()
        holder.wait()
    holder.stdout.close()
    holder.stderr.close()


def run_in_private_mount_ns(func, *args, **kwargs):
    """Call func(*args, **kwargs) in a forked child in a fresh private mount namespace."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns into pytest
        os.close(rfd)
        try:
            enter_private_mount_ns()
            payload = pickle.dumps(("ok", func(*args, **kwargs)))
        except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
            try:
                payload = pickle.dumps(("error", exc, traceback.format_exc()))
            except Exception:  # an unpicklable exception: send its text
                payload = pickle.dumps(("error", RuntimeError(repr(exc)), traceback.format_exc()))
        with os.fdopen(wfd, "wb") as out:
            out.write(payload)
        os._exit(0)
    os.close(wfd)
    with os.fdopen(rfd, "rb") as inp:
        data = inp.read()
    os.waitpid(pid, 0)
    if not data:
        raise RuntimeError("test child died without reporting")
    result = pickle.loads(data)
    if result[0] == "ok":
        return result[1]
    exc, tb = result[1], result[2]
    raise AssertionError(f"in private mount namespace:\n{tb}") from exc


@contextlib.contextmanager
def process_in_mount_ns(propagation: str = "private", proc_at=None, binds=(), cwd=None):
    """Yield the pid of `unshare -m --propagation PROPAGATION sleep 120`, once it is in its own mount
    namespace; with proc_at, a procfs is mounted there inside that namespace, and each (source, target)
    of binds is bind-mounted there (a container's init whose namespace has what the caller's does not:
    the runtime's mounts, a volume); cwd: its working directory (crun starts it in the bundle). Killed on
    exit."""
    proc = subprocess.Popen(["unshare", "-m", "--propagation", propagation, "sleep", "120"], cwd=cwd)
    try:
        # wait until the process is in its own namespace (unshare has exec'd sleep)
        for _ in range(200):
            if os.readlink(f"/proc/{proc.pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt"):
                break
            subprocess.run(["sleep", "0.01"])
        if proc_at is not None:
            subprocess.run(["nsenter", "-t", str(proc.pid), "-m", "mount", "-n", "-t", "proc", "proc", str(proc_at)],
                           check=True)
        for source, target in binds:
            subprocess.run(["nsenter", "-t", str(proc.pid), "-m", "mount", "-n", "--bind", str(source), str(target)],
                           check=True)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def mountinfo_lines() -> set:
    """The mount table of this process as a set of lines without the mount ids (which change)."""
    with open("/proc/self/mountinfo") as f:
        return {" ".join(line.split()[2:]) for line in f}


def mounts_under(path) -> list:
    """(mount point, per-mount options, super options) of each mount at or below path, from mountinfo."""
    path = os.path.realpath(path)
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point = fields[4].replace("\\040", " ")
            sep = fields.index("-")
            if point == path or point.startswith(path + "/"):
                found.append((point, set(fields[5].split(",")), fields[sep + 1]))
    return found


def tree_listing(path) -> dict:
    """Every entry below path with its type and, for symlinks, target: a snapshot to compare."""
    listing = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            link = os.readlink(full) if os.path.islink(full) else None
            listing[os.path.relpath(full, path)] = (st.st_mode, st.st_size, link)
    return listing


# The child unshares, waits for its maps, then becomes the namespace's root (as a runtime's init does)
# and execs the script, with every capability there.
_USERNS_CHILD = """
import ctypes, os, sys
if ctypes.CDLL(None, use_errno=True).unshare(0x10000000 | 0x00020000) != 0:   # CLONE_NEWUSER | CLONE_NEWNS
    sys.exit("unshare failed")
print("unshared", flush=True)
sys.stdin.readline()
os.setgroups([])
os.setresgid(0, 0, 0)
os.setresuid(0, 0, 0)
os.execvp("sh", ["sh", "-c", sys.argv[1]])
"""


def in_user_namespace(script: str, uid: int, gid: int) -> subprocess.Popen:
    """`sh -c script` as root of a user namespace of its own (and of a mount namespace it owns) whose
    ids 0-65535 are the host's uid.. and gid.., mapped by us as a runtime maps them."""
    proc = subprocess.Popen([sys.executable, "-c", _USERNS_CHILD, script], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "unshared\n"
    with open(f"/proc/{proc.pid}/uid_map", "w") as f:
        f.write(f"0 {uid} 65536\n")
    with open(f"/proc/{proc.pid}/gid_map", "w") as f:
        f.write(f"0 {gid} 65536\n")
    proc.stdin.write("go\n")
    proc.stdin.flush()
    return proc

"""Start, stop and list the MPS control daemons of shared devices (`nvidia-ctk mps start|stop|status`),
one daemon per device, in the layout of cdi.mps.

Start: the device's folders are made, a tmpfs is mounted on its shm folder (in the caller's mount
namespace, where containers' mounts are made from), and the driver's `nvidia-cuda-mps-control -d` is run
in a mount namespace of its own where that tmpfs is /dev/shm (cdi.mps_namespace), with
CUDA_VISIBLE_DEVICES = the device's UUID and the pipe and log folders in CUDA_MPS_PIPE_DIRECTORY and
CUDA_MPS_LOG_DIRECTORY, and nothing else of our environment. Then the share limits are set as the
daemon's defaults (set_default_active_thread_percentage, set_default_device_pinned_mem_limit 0) and
read back (get_default_*). Any failure undoes every step. Everything is said to the daemon through the
driver's own control program, so the same code drives NVIDIA's daemon.

A whole GPU is set to EXCLUSIVE_PROCESS compute mode before its daemon starts and to DEFAULT after it
stops, if we changed it (cdi.mps_compute_mode; share.json's `compute_mode_set`); one in PROHIBITED mode
is refused. A MIG device's mode is its GPU's, shared with the other MIG devices: left alone.

Stop: `quit`, wait for the daemon's end, unmount the tmpfs, remove the pipe and shm folders and
share.json; the logs stay.

Revive (the device plugin, when a daemon died): the daemon of a started device is run again in the
same pipe folder and with the same shm tmpfs (the containers of its shares keep their mounts of both,
so their next CUDA program reaches the new daemon), after the dead daemon's servers are ended.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys

from cdi.inventory import Gpu, MigDevice
from cdi import mps_compute_mode
from cdi.mps import SHARE_FILE, DeviceLayout, MpsError, ShareLimits, read_share
from cdi.new_file import write_atomically

CONTROL_PROGRAM = "/usr/bin/nvidia-cuda-mps-control"
PID_FILE = "nvidia-cuda-mps-control.pid"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CONTROL_TIMEOUT = 20.0   # seconds for one exchange with a daemon, and for its end after quit
_UNITS = {"": 0, "K": 10, "M": 20, "G": 30, "T": 40}


def device_id_of(device: Gpu | MigDevice) -> str:
    return f"{device.parent_index}:{device.index}" if isinstance(device, MigDevice) else str(device.index)


def control_program(driver_root) -> str:
    """The host path of the driver's nvidia-cuda-mps-control (a cdi.driver_root.DriverRoot)."""
    found = driver_root.resolve(CONTROL_PROGRAM)
    path = driver_root.host_path(found) if found else None
    if not path or not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise MpsError("no nvidia-cuda-mps-control in the driver root", driver_root.host_path(CONTROL_PROGRAM))
    return path


def parse_size(text: str) -> int | None:
    """`20G`, `20480M`, `0` (as the daemon answers get_default_device_pinned_mem_limit) in bytes."""
    match = re.fullmatch(r"(\d+)([KMGT]?)", text.strip().upper())
    return int(match.group(1)) << _UNITS[match.group(2)] if match else None


def send(control: str, pipe: str, *commands: str) -> list[str] | None:
    """The daemon's answer lines to `commands`, None when no daemon answers in `pipe`."""
    try:
        done = subprocess.run([control], input="".join(c + "\n" for c in commands), capture_output=True,
                              text=True, timeout=CONTROL_TIMEOUT, cwd="/",
                              env={"PATH": DEFAULT_PATH, "CUDA_MPS_PIPE_DIRECTORY": pipe})
    except subprocess.TimeoutExpired:
        raise MpsError("the MPS control daemon does not answer", pipe) from None
    except OSError as e:
        raise MpsError(f"cannot run the control program: {e.strerror}", control) from None
    if done.returncode != 0:
        return None
    return done.stdout.splitlines()


def daemon_pid(layout: DeviceLayout) -> int | None:
    try:
        with open(os.path.join(layout.pipe, PID_FILE), encoding="ascii") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _wait_gone(pid: int) -> bool:
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], CONTROL_TIMEOUT)[0])
    finally:
        os.close(fd)


def _unmount_all(path: str) -> None:
    from libcontainer_c.errors import ContainerFsError
    from libcontainer_c.rootfs import Rootfs

    with Rootfs("/") as fs:
        while os.path.ismount(path):
            try:
                fs.unmount(path)
            except ContainerFsError as e:
                raise MpsError(f"cannot unmount: {e.strerror}", path) from None


def _mount_shm(path: str) -> None:
    from libcontainer_c.errors import ContainerFsError
    from libcontainer_c.rootfs import Rootfs

    try:
        with Rootfs("/") as fs:
            fs.mount_tmpfs(path, "mode=1777").close()
    except ContainerFsError as e:
        raise MpsError(f"cannot mount a tmpfs: {e.strerror}", path) from None


def _start_command(control: str, layout: DeviceLayout) -> list[str]:
    return ["unshare", "--mount", "--propagation", "private",
            sys.executable, "-I", "-m", "cdi.mps_namespace", layout.shm, "--", control, "-d"]


def _configure(control: str, layout: DeviceLayout, limits: ShareLimits) -> None:
    answer = send(control, layout.pipe,
                  f"set_default_active_thread_percentage {limits.active_thread_percentage}",
                  f"set_default_device_pinned_mem_limit 0 {limits.pinned_mem_limit}",
                  "get_default_active_thread_percentage", "get_default_device_pinned_mem_limit 0")
    if answer is None:
        raise MpsError("the MPS control daemon did not answer after its start", layout.pipe)
    try:
        percentage, pinned = float(answer[-2]), parse_size(answer[-1])
    except (IndexError, ValueError):
        percentage, pinned = None, None
    if percentage != limits.active_thread_percentage or pinned != limits.pinned_mem_limit_mib << 20:
        raise MpsError(f"the MPS control daemon did not take the limits: {' | '.join(answer)}", layout.pipe)


@contextlib.contextmanager
def _locked(mps_root: str):
    """One start or stop at a time under an MPS root (flock on the root folder, made if missing), so
    that two callers never start two daemons for one device or stop one being started."""
    try:
        os.makedirs(mps_root, 0o755, exist_ok=True)
        fd = os.open(mps_root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise MpsError(f"cannot make or open the MPS root: {e.strerror}", mps_root) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def start(driver_root, mps_root: str, device: Gpu | MigDevice, replicas: int, owner: str = "nvidia-ctk") -> dict:
    """Start the daemon of `device` with the limits of `replicas` shares; returns its share.json (which
    records `owner`, the program that started it)."""
    layout = DeviceLayout(mps_root, device.uuid)
    limits = ShareLimits(replicas, device.memory_total)
    control = control_program(driver_root)
    with _locked(layout.root):
        if read_share(layout) is not None:
            if send(control, layout.pipe, "get_server_list") is not None:
                raise MpsError("an MPS control daemon already runs for the device (nvidia-ctk mps stop first)",
                               layout.dir)
            _stop(layout)       # what a daemon that died left behind
        identity = {"uuid": device.uuid, "device": device_id_of(device), "memory_total": device.memory_total,
                    "owner": owner, "nvidia_smi": None, "compute_mode_set": False}
        if isinstance(device, Gpu):
            smi = mps_compute_mode.nvidia_smi_program(driver_root)
            identity.update(nvidia_smi=smi, compute_mode_set=mps_compute_mode.make_exclusive(smi, device.uuid))
        try:
            return _start(control, layout, identity, limits)
        except BaseException:
            with contextlib.suppress(MpsError):     # the start's own error is the one to tell
                _restore_compute_mode(identity)
            raise


def _restore_compute_mode(share: dict) -> None:
    """DEFAULT again on a GPU whose EXCLUSIVE_PROCESS mode we set (share.json's `compute_mode_set`)."""
    smi = share.get("nvidia_smi")
    if share.get("compute_mode_set") is True and isinstance(smi, str) and os.path.isfile(smi):
        mps_compute_mode.restore_default(smi, share["uuid"])


def answers(share: dict, layout: DeviceLayout) -> bool:
    """The daemon of a share.json answers on its control socket."""
    control = share.get("control")
    return isinstance(control, str) and os.path.isfile(control) and \
        send(control, layout.pipe, "get_server_list") is not None


def revive(mps_root: str, uuid: str) -> dict:
    """Run the daemon of a started device again when it no longer answers (it died, or hangs, or its
    socket is gone: then it is ended first), with the limits of its share.json, in the same pipe folder
    and shm tmpfs; the servers of the old daemon are ended. Returns the share.json in force (unchanged
    when the daemon answers)."""
    layout = DeviceLayout(mps_root, uuid)
    with _locked(layout.root):
        share = read_share(layout)
        if share is None:
            raise MpsError("no MPS control daemon was started for the device", layout.dir)
        if answers(share, layout):
            return share
        control = share.get("control")
        if not isinstance(control, str) or not os.path.isfile(control):
            raise MpsError("the control program of the daemon is gone", str(control))
        _terminate(share.get("pid"), control)
        _end_servers(share, control)
        try:
            limits = ShareLimits(int(share["replicas"]), int(share["memory_total"]))
            identity = {k: share[k] for k in ("uuid", "device", "memory_total")}
        except (KeyError, TypeError, ValueError):
            raise MpsError("share.json does not say what the daemon was started for", layout.share_file) from None
        identity["owner"] = share.get("owner", "nvidia-ctk")
        identity["nvidia_smi"] = share.get("nvidia_smi")                # the mode is the GPU's: it outlived
        identity["compute_mode_set"] = share.get("compute_mode_set") is True   # the dead daemon
        return _start(control, layout, identity, limits)


def _mount_namespace(pid: int | None) -> str | None:
    try:
        st = os.stat(f"/proc/{pid}/ns/mnt")
    except (OSError, TypeError):
        return None
    return f"{st.st_dev}:{st.st_ino}"


def _end_servers(share: dict, control: str) -> None:
    """SIGTERM the servers a daemon that died left running: the processes of its control program in its
    private mount namespace (recorded in share.json; a namespace lives while a process is in it, so no
    other process can have it). They end on SIGTERM; waited for up to CONTROL_TIMEOUT."""
    namespace = share.get("mount_namespace")
    if not isinstance(namespace, str):
        return
    fds = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or _mount_namespace(int(entry)) != namespace:
            continue
        try:
            fd = os.pidfd_open(int(entry))
        except OSError:
            continue
        try:
            if os.path.samefile(f"/proc/{entry}/exe", control):
                signal.pidfd_send_signal(fd, signal.SIGTERM)
                fds.append(fd)
                continue
        except OSError:
            pass
        os.close(fd)
    for fd in fds:
        try:
            select.select([fd], [], [], CONTROL_TIMEOUT)
        finally:
            os.close(fd)


def _start(control: str, layout: DeviceLayout, identity: dict, limits: ShareLimits) -> dict:
    created = [p for p in (layout.dir, layout.pipe, layout.log, layout.shm) if not os.path.isdir(p)]
    started = mounted = False
    try:
        for path in created:
            os.mkdir(path, 0o755)
        if not os.path.ismount(layout.shm):     # a revived daemon keeps the tmpfs its shares have
            _mount_shm(layout.shm)
            mounted = True
        env = {"PATH": DEFAULT_PATH, "CUDA_MPS_PIPE_DIRECTORY": layout.pipe, "CUDA_MPS_LOG_DIRECTORY": layout.log,
               "CUDA_VISIBLE_DEVICES": identity["uuid"]}
        try:
            done = subprocess.run(_start_command(control, layout), env=env, cwd="/", capture_output=True,
                                  text=True, stdin=subprocess.DEVNULL, timeout=CONTROL_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise MpsError("the MPS control daemon did not start in time", control) from None
        if done.returncode != 0:
            detail = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
            raise MpsError(f"the MPS control daemon did not start: {detail}", control)
        started = True
        _configure(control, layout, limits)
        pid = daemon_pid(layout)
        share = {"uuid": identity["uuid"], "device": identity["device"], "replicas": limits.replicas,
                 "active_thread_percentage": limits.active_thread_percentage,
                 "pinned_mem_limit": limits.pinned_mem_limit, "memory_total": identity["memory_total"],
                 "control": control, "pid": pid, "mount_namespace": _mount_namespace(pid),
                 "owner": identity["owner"], "nvidia_smi": identity["nvidia_smi"],
                 "compute_mode_set": identity["compute_mode_set"]}
        write_atomically(layout.share_file, json.dumps(share, indent=2) + "\n")
        return share
    except BaseException:
        if started:
            _quit(control, layout)
        if mounted:
            _unmount_all(layout.shm)
        for path in reversed(created):
            shutil.rmtree(path, ignore_errors=True)
        raise


def _quit(control: str, layout: DeviceLayout) -> None:
    pid = daemon_pid(layout)
    if send(control, layout.pipe, "quit") is not None and pid is not None and not _wait_gone(pid):
        raise MpsError(f"the MPS control daemon (pid {pid}) did not end after quit", layout.pipe)


def _terminate(pid: object, control: str) -> None:
    """End a daemon that did not answer quit (its socket removed, or hung): SIGTERM (it ends its servers),
    then SIGKILL. Only the process of that pid whose program is the daemon's: a pid reused since by
    another program is left alone."""
    if not isinstance(pid, int) or pid <= 1:
        return
    try:
        fd = os.pidfd_open(pid)
    except (ProcessLookupError, OSError):
        return
    try:
        if not os.path.samefile(f"/proc/{pid}/exe", control):
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            signal.pidfd_send_signal(fd, sig)
            if select.select([fd], [], [], CONTROL_TIMEOUT)[0]:
                return
        raise MpsError(f"the MPS control daemon (pid {pid}) did not end", control)
    except (FileNotFoundError, ProcessLookupError):
        return          # it ended meanwhile
    finally:
        os.close(fd)


def stop(mps_root: str, uuid: str) -> None:
    """Quit the daemon of device `uuid` (if it still runs) and take away its shm and pipe folder."""
    layout = DeviceLayout(mps_root, uuid)
    if read_share(layout) is None:      # checked before the lock would make the root
        raise MpsError("no MPS control daemon was started for the device", layout.dir)
    with _locked(layout.root):
        _stop(layout)


def _stop(layout: DeviceLayout) -> None:
    share = read_share(layout)
    if share is None:
        raise MpsError("no MPS control daemon was started for the device", layout.dir)
    control = share.get("control")
    if isinstance(control, str) and os.path.isfile(control):
        _quit(control, layout)
        _terminate(share.get("pid"), control)
        _end_servers(share, control)
    _unmount_all(layout.shm)
    for path in (layout.pipe, layout.shm):
        shutil.rmtree(path, ignore_errors=True)
    os.unlink(layout.share_file)
    _restore_compute_mode(share)        # after the server is gone, as NVIDIA's daemon does


def status(mps_root: str) -> list[dict]:
    """Each started daemon's share.json with what the daemon answers now: `running`, and the
    `daemon_active_thread_percentage` and `daemon_pinned_mem_limit` (bytes) it gives new servers;
    in device order."""
    try:
        names = sorted(os.listdir(mps_root))
    except FileNotFoundError:
        return []
    rows = []
    for name in names:
        if not os.path.isfile(os.path.join(mps_root, name, SHARE_FILE)):
            continue
        layout = DeviceLayout(mps_root, name)
        share = read_share(layout) or {}
        control = share.get("control")
        answer = send(control, layout.pipe, "get_default_active_thread_percentage",
                      "get_default_device_pinned_mem_limit 0", "get_server_list") \
            if isinstance(control, str) and os.path.isfile(control) else None
        row = {**share, "uuid": name, "running": False}
        if answer is not None and len(answer) >= 2 and re.fullmatch(r"\d+(\.\d+)?", answer[0]):
            row.update(running=True, daemon_active_thread_percentage=float(answer[0]),
                       daemon_pinned_mem_limit=parse_size(answer[1]),
                       servers=[int(p) for p in answer[2:] if p.isdigit()])
        rows.append(row)
    return sorted(rows, key=_device_order)


def _device_order(row: dict) -> tuple:
    """GPU 0, 1, 1:0, 2 ... as nvidia-smi lists them; a share.json without a device last."""
    parts = str(row.get("device", "")).split(":")
    return (0, [int(p) for p in parts], row["uuid"]) if all(p.isdigit() for p in parts) else (1, [], row["uuid"])

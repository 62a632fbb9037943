"""sharing.mps: the plugin's MPS control daemons, one per shared GPU, the CDI devices of their shares, and
what it does when a daemon dies.

At every start of the plugins (device_plugin.manager), for the replicas sharing.mps made
(device_plugin.replicas: `<UUID>::<n>`), `ensure`:
- keeps the daemon of a shared GPU that answers with the same number of replicas, and otherwise starts
  one with cdi.mps_daemon.start (the code of `nvidia-ctk mps start`: its folders under `--mps-root`, a
  private /dev/shm, 100/replicas percent of the threads and memory/replicas of pinned memory as the
  daemon's defaults), recorded as the plugin's (`owner` in share.json);
- stops the plugin's daemons of GPUs no longer shared; a daemon some other program started (nvidia-ctk
  mps start) is used when it answers with the same replicas, and is an error naming it when it has
  others; the plugin never stops it (a dead one is replaced by one of the plugin's);
- writes `<--cdi-root>/nvidia-mps.yaml`: kind nvidia.com/gpu, one device per share named as the
  plugin hands it to the runtime (`<UUID>::<n>` and `<index>::<n>`), whose edits are the share's
  (cdi.mps.share_edits: the pipe folder, the daemon's /dev/shm, CUDA_MPS_PIPE_DIRECTORY). The GPU's own
  nodes and driver files come from the plugin's main spec (the GPU's own name, given beside the share's).

A watcher thread holds a pidfd of each daemon and looks every WATCH_SECONDS for a daemon that ended or
whose control socket is gone: its shares are marked Unhealthy at once (every ListAndWatch stream hears
it), the daemon is revived (cdi.mps_daemon.revive: the same pipe folder and tmpfs, so pods already
running reach the new daemon), and its shares are Healthy again; a revival that fails is tried again
every RETRY_SECONDS, the shares Unhealthy meanwhile. When the program ends, its daemons are stopped and
the spec removed.
"""
from __future__ import annotations

import os
import select
import threading

from cdi.errors import CdiError
from cdi.log import get_logger
from device_plugin.resources import Resource

LOG = get_logger("nvidia-device-plugin")
OWNER = "nvidia-device-plugin"
SPEC_NAME = "nvidia-mps.yaml"
WATCH_SECONDS = 0.5
RETRY_SECONDS = 5.0


class MpsSharesError(CdiError):
    """The MPS daemons of sharing.mps cannot be started as configured."""


def shared_devices(resources: list[Resource]) -> dict[str, tuple[object, list[str]]]:
    """UUID -> (a PluginDevice of it, the IDs of its shares) of every replicated device."""
    shared: dict[str, tuple[object, list[str]]] = {}
    for resource in resources:
        for device in resource.devices:
            if device.replica is not None:
                shared.setdefault(device.uuid, (device, []))[1].append(device.id)
    return shared


class _Daemon:
    """One running daemon as the watcher follows it."""

    def __init__(self, uuid: str, share: dict, share_ids: list[str]):
        self.uuid, self.share_ids = uuid, share_ids
        self.pidfd: int | None = None
        self.retry_at: float | None = None
        self.follow(share)

    def follow(self, share: dict) -> None:
        self.close()
        self.share = share
        try:
            self.pidfd = os.pidfd_open(int(share["pid"]))
        except (OSError, KeyError, TypeError, ValueError):
            self.pidfd = None   # already gone: the next look revives it

    def close(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


class MpsShares:
    def __init__(self, health):
        self.health = health
        self.config = None
        self.daemons: dict[str, _Daemon] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- at every start of the plugins

    def ensure(self, config, inventory, resources: list[Resource]) -> None:
        """Daemons and spec for the shares of resources (none without sharing.mps: the plugin's daemons
        are stopped, its spec removed). MpsSharesError or cdi's errors when a daemon cannot start."""
        from cdi import mps_daemon
        from cdi.driver_root import DriverRoot

        with self._lock:
            previous, self.config = self.config, config
            wanted = shared_devices(resources) if config.mps is not None else {}
            if previous is not None and (previous.mps_root != config.mps_root or not wanted):
                self._stop_all(previous)
            if not wanted:
                return
            driver_root = DriverRoot(config.nvidia_driver_root)
            for row in mps_daemon.status(config.mps_root):
                if row.get("owner") == OWNER and row["uuid"] not in wanted:
                    LOG.info("stopping the MPS control daemon of %s (no longer shared)", row["uuid"])
                    mps_daemon.stop(config.mps_root, row["uuid"])
                    self._forget(row["uuid"])
            for uuid, (_device, share_ids) in wanted.items():
                share = self._daemon_for(config, driver_root, inventory, uuid, len(share_ids))
                self._forget(uuid)
                self.daemons[uuid] = _Daemon(uuid, share, share_ids)
                self.health.set_healthy(share_ids, True)
            self._write_spec(config, wanted)
        self._start_watching()

    @staticmethod
    def _daemon_for(config, driver_root, inventory, uuid: str, replicas: int) -> dict:
        """The share.json of the GPU's daemon: the running one when it answers with these replicas, else
        a new one (the plugin's own old one stopped first)."""
        from cdi import mps_daemon
        from cdi.mps import DeviceLayout, find_device, read_share

        layout = DeviceLayout(config.mps_root, uuid)
        share = read_share(layout)
        if share is not None and share.get("replicas") == replicas and mps_daemon.answers(share, layout):
            LOG.info("MPS control daemon of %s kept (pid %s, %d shares)", uuid, share.get("pid"), replicas)
            return share
        if share is not None:
            if share.get("owner") != OWNER and share.get("replicas") != replicas:
                raise MpsSharesError(f"an MPS control daemon not started by the plugin holds the GPU with "
                                     f"{share.get('replicas')} replicas, not {replicas} (nvidia-ctk mps stop "
                                     f"--device {uuid})", layout.dir)
            mps_daemon.stop(config.mps_root, uuid)
        share = mps_daemon.start(driver_root, config.mps_root, find_device(uuid, inventory), replicas, owner=OWNER)
        LOG.info("MPS control daemon of %s started (pid %s): %d shares of %s%% threads and %s pinned memory",
                 uuid, share["pid"], replicas, share["active_thread_percentage"], share["pinned_mem_limit"])
        return share

    def _write_spec(self, config, wanted) -> None:
        from cdi.mps import share_edits
        from cdi.spec import Device, Spec
        from cdi.spec_file import write_spec

        devices = []
        for uuid, (device, share_ids) in sorted(wanted.items(), key=lambda item: item[1][0].gpu_index):
            edits = share_edits(config.mps_root, uuid)
            for share_id in share_ids:
                replica = share_id.rsplit("::", 1)[1]
                devices += [Device(name=share_id, container_edits=edits),
                            Device(name=f"{device.index}::{replica}", container_edits=edits)]
        os.makedirs(config.cdi_root, 0o755, exist_ok=True)
        write_spec(Spec(version=None, kind="nvidia.com/gpu", devices=devices), os.path.join(config.cdi_root, SPEC_NAME))

    def _forget(self, uuid: str) -> None:
        daemon = self.daemons.pop(uuid, None)
        if daemon is not None:
            daemon.close()

    def _stop_all(self, config) -> None:
        from cdi import mps_daemon

        for uuid, daemon in list(self.daemons.items()):
            if daemon.share.get("owner") == OWNER:   # a daemon of nvidia-ctk mps start is used, never stopped
                try:
                    mps_daemon.stop(config.mps_root, uuid)
                    LOG.info("MPS control daemon of %s stopped", uuid)
                except CdiError as e:
                    LOG.error("stopping the MPS control daemon failed: %s", e)
            self._forget(uuid)
        if config.cdi_root:
            try:
                os.unlink(os.path.join(config.cdi_root, SPEC_NAME))
            except FileNotFoundError:
                pass

    # -- daemon death

    def _start_watching(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="mps-watch", daemon=True)
            self._thread.start()

    def _dead(self, daemon: _Daemon) -> str | None:
        """Why the daemon no longer serves its shares, None while it does."""
        from cdi.mps import DeviceLayout

        if daemon.pidfd is None or select.select([daemon.pidfd], [], [], 0)[0]:
            return "ended"
        if not os.path.exists(os.path.join(DeviceLayout(self.config.mps_root, daemon.uuid).pipe, "control")):
            return "lost its control socket"
        return None

    def check(self) -> None:
        """One look at every daemon: a dead one's shares Unhealthy, revived, Healthy again."""
        import time

        from cdi import mps_daemon

        with self._lock:
            for daemon in list(self.daemons.values()):
                why = self._dead(daemon) if daemon.retry_at is None else None
                if daemon.retry_at is None and why is None:
                    continue
                if daemon.retry_at is None:
                    LOG.error("the MPS control daemon of %s (pid %s) %s; its %d shares are Unhealthy, starting "
                              "it again", daemon.uuid, daemon.share.get("pid"), why, len(daemon.share_ids))
                    self.health.set_healthy(daemon.share_ids, False)
                elif time.monotonic() < daemon.retry_at:
                    continue
                try:
                    share = mps_daemon.revive(self.config.mps_root, daemon.uuid)
                except CdiError as e:
                    LOG.error("the MPS control daemon of %s did not start again: %s; retrying in %g s",
                              daemon.uuid, e, RETRY_SECONDS)
                    daemon.retry_at = time.monotonic() + RETRY_SECONDS
                    continue
                daemon.retry_at = None
                daemon.follow(share)
                LOG.info("MPS control daemon of %s running again (pid %s); its shares are Healthy",
                         daemon.uuid, share.get("pid"))
                self.health.set_healthy(daemon.share_ids, True)

    def _watch(self) -> None:
        while not self._stop.wait(WATCH_SECONDS):
            try:
                self.check()
            except Exception as e:   # the watcher never ends the plugin; one line in the log
                LOG.error("watching the MPS control daemons: %s: %s", type(e).__name__, e)

    def close(self) -> None:
        """Stops the watcher, the plugin's daemons, and removes the shares' spec (the program ends)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            if self.config is not None:
                self._stop_all(self.config)

"""The plugin's life: read the config and the GPUs, serve one plugin per resource, register each with
the kubelet, and start over when the node changes under it.

It starts over (stops every server, reads everything again, serves and registers again):
- when kubelet.sock is re-created (a restarted kubelet forgets every plugin): an inotify watch on the
  folder (device_plugin.created_watch), or a new identity of the socket, looked at every POLL_SECONDS;
- on SIGHUP, and when the config file changes (its identity, size or time);
- while the driver is not there (failOnInitError false) or the kubelet could not be reached, every
  RETRY_SECONDS.
A config that cannot be read at a reload is one error line and the running plugins keep serving with
the config they have. SIGTERM, SIGINT and SIGQUIT stop the servers, remove their sockets and end the
program with status 0.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from cdi.errors import CdiError
from cdi.inventory import Inventory
from cdi.log import get_logger
from device_plugin.config import Config
from device_plugin.created_watch import CreatedWatch
from device_plugin.health import DeviceHealth, EventSource, HealthWatcher, ignored_xids
from device_plugin.kubelet import KUBELET_SOCKET, kubelet_socket, register, socket_identity
from device_plugin.mps_shares import MpsShares
from device_plugin.replicas import replicate
from device_plugin.resources import Resource, build_resources
from device_plugin.server import PluginServer, options
from device_plugin.topology import Topology

LOG = get_logger("nvidia-device-plugin")
POLL_SECONDS = 0.2
RETRY_SECONDS = 5.0


class InitError(CdiError):
    """The plugin cannot start: no driver, no GPUs it can offer, a socket it cannot serve."""


class _StopAsked(Exception):
    """A stop (SIGTERM, SIGINT, SIGQUIT) came while the GPUs were being read."""


@dataclass
class Sources:
    """Where the plugin gets what it serves (tests give their own)."""
    config: Callable[[], Config]
    inventory: Callable[[Config], Inventory]
    # the GPU topology (device_plugin.topology.nvml_topology), given what nvml_reads started
    topology: Callable[[Config, Inventory, object], Topology]
    refresh_spec: Callable[[Config, Inventory, list[Resource]], object] = field(default=lambda *args: None)
    # the driver's XID events (device_plugin.health); None: not available, no health checks
    events: Callable[[Config], EventSource | None] = field(default=lambda config: None)
    # the node's labels (device_plugin.labels_command.write_node_labels), from the GPUs just read and what
    # nvml_reads started
    labels: Callable[[Config, Inventory, object], object] = field(default=lambda config, inventory, reads: None)
    # NVML's reads for the labels and the topology, started once per start of the plugins in one child that
    # runs while the rest of the start is done (device_plugin.nvml_child.ChildRead); None: nothing to read
    nvml_reads: Callable[[Config, Inventory], object] = field(default=lambda config, inventory: None)


def _file_identity(path: str) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class PluginManager:
    def __init__(self, sources: Sources, config: Config):
        self.sources, self.config = sources, config
        self.health = DeviceHealth()
        self.mps = MpsShares(self.health)   # sharing.mps: the daemons, kept across starts of the plugins
        self.lost_gpus: set[str] = set()   # GPUs the driver lost, watched for recovery across restarts
        self.servers: list[PluginServer] = []
        self.resources: list[Resource] = []
        self._stop, self._reload = threading.Event(), threading.Event()
        self._kubelet: tuple[int, int, int] | None = None
        self._config_file: tuple | None = None
        self._watch: CreatedWatch | None = None
        self._health_watcher: HealthWatcher | None = None
        self._health_stall_reported = False

    # -- one start

    def start_plugins(self) -> bool:
        """Serves and registers every resource; True when all are registered. InitError when the GPUs
        cannot be read or offered."""
        try:
            inventory = self._unless_stopped(self.sources.inventory, self.config)
        except _StopAsked:
            raise
        except CdiError as e:
            raise InitError(e.what, e.where) from None
        except Exception as e:
            raise InitError(str(e)) from None
        reads = self.sources.nvml_reads(self.config, inventory)   # read while the rest is done
        try:
            try:
                self.sources.labels(self.config, inventory, reads)   # before the resources: a node they refuse is labelled
                self.resources = replicate(build_resources(inventory, self.config.mig_strategy), self.config.sharing)
                self.sources.refresh_spec(self.config, inventory, self.resources)
                self.mps.ensure(self.config, inventory, self.resources)
            except CdiError as e:
                raise InitError(e.what, e.where) from None
            except Exception as e:   # e.g. ctk's CliError from the spec's generation
                raise InitError(str(e)) from None
            if not self.resources:
                LOG.warning("no GPUs to offer under mig-strategy=%s; waiting", self.config.mig_strategy)
            topology = self.sources.topology(self.config, inventory, reads)
        finally:
            if reads is not None:
                reads.cancel()   # answered by now, or not needed any more: no child outlives the start
        self._watch_health(inventory)
        self.servers = [PluginServer(r, self.config, self.health, topology.pair_score) for r in self.resources]
        for server in self.servers:
            try:
                server.start()
            except CdiError as e:
                raise InitError(e.what, e.where) from None
        self._kubelet = socket_identity(kubelet_socket(self.config.device_plugin_dir))
        registered = True
        for server in self.servers:
            try:
                register(self.config.device_plugin_dir, server.endpoint, server.resource.name, options())
                LOG.info("registered %s with the kubelet", server.resource.name)
            except CdiError as e:
                LOG.error("%s; retrying when the kubelet's socket is re-created, or in %g s", e, RETRY_SECONDS)
                registered = False
        return registered

    def _unless_stopped(self, read, *args):
        """read(*args), in a thread while this one watches for a stop: a driver that hangs keeps the read
        going for up to NVIDIA_CTK_NVML_TIMEOUT, and a SIGTERM meanwhile ends the program at once
        (_StopAsked) instead of at the deadline (the reader, gct-nvml-inventory, ends itself there)."""
        done, result = threading.Event(), {}

        def work():
            try:
                result["value"] = read(*args)
            except BaseException as e:   # handed to the caller as it is
                result["error"] = e
            finally:
                done.set()
        threading.Thread(target=work, name="read-gpus", daemon=True).start()
        while not done.wait(POLL_SECONDS):
            if self._stop.is_set():
                raise _StopAsked
        if "error" in result:
            raise result["error"]
        return result["value"]

    def _watch_health(self, inventory: Inventory) -> None:
        """Starts applying the driver's XID events to the devices' health, in a thread of its own: the
        event set is made there too, so a driver that hangs in it never holds up serving (the loop reports
        it: _report_stalled_health)."""
        ignored = ignored_xids(dict(os.environ))
        if ignored is None:
            LOG.info("health checks off: DP_DISABLE_HEALTHCHECKS")
            return
        members = {g.uuid: [g.uuid, *(m.uuid for m in g.mig_devices)] for g in inventory.gpus}
        migs = {(g.uuid, m.gi, m.ci): m.uuid for g in inventory.gpus for m in g.mig_devices}
        watcher = HealthWatcher(None, self.health, lambda uuid: members.get(uuid, []), ignored,
                                lambda uuid, gi, ci: migs.get((uuid, gi, ci)), self.lost_gpus)
        self._health_watcher, self._health_stall_reported = watcher, False
        threading.Thread(target=self._run_health, args=(watcher,), name="health", daemon=True).start()

    def _run_health(self, watcher: HealthWatcher) -> None:
        watcher.source = watcher._driver_call(self.sources.events, self.config)
        if watcher.source is None:
            LOG.info("health checks off: the driver gives no health events")
            return
        watcher.run()   # ends at once (closing the source) when the plugins stopped meanwhile

    def _report_stalled_health(self) -> None:
        """One error line when the driver has not answered the health thread in NVIDIA_CTK_NVML_TIMEOUT:
        health checks are stalled, the plugins keep serving with the health the devices have."""
        from cdi.nvml import NVML_TIMEOUT_ENV, nvml_timeout

        watcher = self._health_watcher
        if watcher is None or self._health_stall_reported or not watcher.stalled(nvml_timeout()):
            return
        self._health_stall_reported = True
        LOG.error("health checks stalled: NVML did not answer in %g s (the driver hangs; %s sets the limit); "
                  "serving on with the devices' last known health", nvml_timeout(), NVML_TIMEOUT_ENV)

    def stop_plugins(self) -> None:
        if self._health_watcher is not None:
            self._health_watcher.stop()
            self._health_watcher = None
        for server in self.servers:
            server.stop()
        self.servers = []

    # -- the loop

    def request_stop(self, *_args) -> None:
        self._stop.set()

    def request_reload(self, *_args) -> None:
        self._reload.set()

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGHUP, self.request_reload)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
            signal.signal(sig, self.request_stop)

    def _reloaded_config(self) -> Config | None:
        try:
            return self.sources.config()
        except CdiError as e:
            LOG.error("config not reloaded, keeping the running one: %s", e)
            return None

    def _changed(self) -> str | None:
        """Why the plugins should start over now, if they should."""
        if self._reload.is_set():
            self._reload.clear()
            return "SIGHUP"
        kubelet = socket_identity(kubelet_socket(self.config.device_plugin_dir))
        created = self._watch is not None and self._watch.created()
        if kubelet is not None and (created or kubelet != self._kubelet):
            return "kubelet.sock re-created"
        if self.config.config_file and _file_identity(self.config.config_file) != self._config_file:
            return "config file changed"
        return None

    def run(self) -> int:
        """Serves until asked to stop; 1 for an init error with failOnInitError, else 0. The MPS daemons
        of sharing.mps are stopped when it returns or raises."""
        try:
            return self._serve()
        finally:
            self.mps.close()

    def _serve(self) -> int:
        retry_at: float | None = None
        starting = True
        while not self._stop.is_set():
            if starting:
                self.stop_plugins()
                if self._watch is not None:
                    self._watch.close()
                self._watch = CreatedWatch(self.config.device_plugin_dir, KUBELET_SOCKET)
                self._config_file = _file_identity(self.config.config_file) if self.config.config_file else None
                try:
                    retry_at = None if self.start_plugins() else time.monotonic() + RETRY_SECONDS
                except _StopAsked:
                    LOG.info("stopping while the GPUs were being read")
                    break
                except InitError as e:
                    self.stop_plugins()
                    if self.config.fail_on_init_error:
                        raise
                    LOG.error("%s; retrying in %g s (failOnInitError is false)", e, RETRY_SECONDS)
                    retry_at = time.monotonic() + RETRY_SECONDS
                starting = False
            self._stop.wait(POLL_SECONDS)
            self._report_stalled_health()
            reason = self._changed()
            if reason is None and retry_at is not None and time.monotonic() >= retry_at:
                reason = "retrying"
            if reason in ("SIGHUP", "config file changed"):
                config = self._reloaded_config()
                if config is None:   # keep serving; look again only when the file changes again
                    self._config_file = _file_identity(self.config.config_file) if self.config.config_file else None
                    reason = None
                else:
                    self.config = config
            if reason is not None and not self._stop.is_set():
                LOG.info("%s: starting the plugins again", reason)
                starting = True
        self.stop_plugins()
        if self._watch is not None:
            self._watch.close()
        return 0

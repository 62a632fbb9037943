"""Device health: the Healthy/Unhealthy state every ListAndWatch stream reports, and what changes it.

DeviceHealth holds the state (by device UUID) and wakes every waiting stream at once on a change, so
each change reaches the kubelet without delay. HealthWatcher turns driver events into changes, as
NVIDIA's plugin does: a critical XID on a GPU marks the GPU and its MIG devices Unhealthy (an XID about
one MIG device, named by its GPU and compute instance, marks that MIG device only); the application
XIDs (APPLICATION_XIDS: errors of one program, not of the GPU) change nothing;
DP_DISABLE_HEALTHCHECKS=all (or xids) turns the checks off, a list of numbers ignores those XIDs too.
Beyond NVIDIA's (whose devices never come back), a GPU that NVML lost and that answers again after a
reset (GpuRecovered) is marked Healthy again, with its MIG devices (HealthWatcher.recover).

The events come from an EventSource (one `wait(timeout)` call): the program's is NVML's
(device_plugin.health_child.nvml_event_source), tests give their own.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol

HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
DISABLE_ENV = "DP_DISABLE_HEALTHCHECKS"


class DeviceHealth:
    """UUID -> healthy, and a generation number that grows at every change."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._unhealthy: set[str] = set()
        self.generation = 0

    def health(self, *keys: str) -> str:
        """Unhealthy when any of keys is (a share is its GPU's UUID and its own `<UUID>::<n>`)."""
        with self._changed:
            return UNHEALTHY if self._unhealthy.intersection(keys) else HEALTHY

    def set_healthy(self, uuids, healthy: bool) -> bool:
        """Marks uuids; wakes the waiting streams when anything changed (returned)."""
        with self._changed:
            before = set(self._unhealthy)
            if healthy:
                self._unhealthy.difference_update(uuids)
            else:
                self._unhealthy.update(uuids)
            if self._unhealthy == before:
                return False
            self.generation += 1
            self._changed.notify_all()
            return True

    def wake(self) -> None:
        """Wakes the waiting streams without a change (to let them see that they are to end)."""
        with self._changed:
            self._changed.notify_all()

    def wait_for_change(self, seen: int, timeout: float) -> int:
        """The generation once it is past seen, or when timeout passes or wake() is called."""
        with self._changed:
            if self.generation == seen:
                self._changed.wait(timeout)
            return self.generation


@dataclass(frozen=True)
class XidEvent:
    gpu_uuid: str
    xid: int
    gi: int | None = None   # MIG: the GPU instance and compute instance concerned; None: the whole GPU
    ci: int | None = None


@dataclass(frozen=True)
class GpuLost:
    """NVML cannot tell about the GPU (its event set failed): Unhealthy whatever the ignored XIDs."""
    gpu_uuid: str


@dataclass(frozen=True)
class GpuRecovered:
    """A GPU that NVML had lost answers again."""
    gpu_uuid: str


HealthEvent = XidEvent | GpuLost | GpuRecovered


class EventSource(Protocol):
    def wait(self, timeout: float) -> list[HealthEvent]: ...

    # optional: `answers(gpu_uuid) -> bool`, the driver answers for the GPU (it is not lost); a source
    # without it gives no recovery


RECOVERY_POLL_SECONDS = 0.5


def ignored_xids(environ: dict[str, str]) -> frozenset[int] | None:
    """The XIDs that change nothing; None: health checks are off (DP_DISABLE_HEALTHCHECKS)."""
    value = environ.get(DISABLE_ENV, "").strip().lower()
    extra: set[int] = set()
    for item in (v.strip() for v in value.split(",") if v.strip()):
        if item in ("all", "xids"):
            return None
        if item.isdigit():
            extra.add(int(item))
    return APPLICATION_XIDS | extra


class HealthWatcher:
    """Applies the events of source to health: a critical XID on a GPU marks devices_of(gpu_uuid) (the
    GPU and its MIG devices), one on a MIG device mig_of(gpu_uuid, gi, ci) (its UUID, None: not one
    this plugin serves, as NVIDIA's skips it).

    Recovery: a GPU that does not answer the driver after its critical XID goes into `lost`, and is asked
    again every RECOVERY_POLL_SECONDS; once it answers it is GpuRecovered. `lost` belongs to the caller,
    so that a GPU lost before the plugins started over is still watched by the next watcher (its health
    is kept across restarts too)."""

    def __init__(self, source: EventSource, health: DeviceHealth, devices_of, ignored: frozenset[int],
                 mig_of=lambda gpu_uuid, gi, ci: None, lost: set[str] | None = None):
        self.source, self.health, self.devices_of, self.ignored = source, health, devices_of, ignored
        self.mig_of = mig_of
        self.lost = set() if lost is None else lost
        self._stop = threading.Event()
        self.busy_since: float | None = None   # monotonic time a driver call began, while one is running

    def stalled(self, seconds: float) -> bool:
        """A driver call (an event wait, a GPU asked) has not returned for seconds: the driver hangs."""
        import time

        since = self.busy_since
        return since is not None and time.monotonic() - since > seconds

    def _driver_call(self, call, *args):
        import time

        self.busy_since = time.monotonic()
        try:
            return call(*args)
        finally:
            self.busy_since = None

    def handle(self, event: HealthEvent) -> bool:
        """Applies one event; True when a device's health changed."""
        if isinstance(event, GpuRecovered):
            return self.health.set_healthy(self.devices_of(event.gpu_uuid), True)
        if isinstance(event, GpuLost):
            return self.health.set_healthy(self.devices_of(event.gpu_uuid), False)
        if event.xid in self.ignored:
            return False
        if not self._answers(event.gpu_uuid):
            self.lost.add(event.gpu_uuid)
        if event.gi is not None:
            mig = self.mig_of(event.gpu_uuid, event.gi, event.ci)
            return mig is not None and self.health.set_healthy([mig], False)
        return self.health.set_healthy(self.devices_of(event.gpu_uuid), False)

    def _answers(self, uuid: str) -> bool:
        answers = getattr(self.source, "answers", None)
        return answers is None or self._driver_call(answers, uuid)

    def recover(self) -> None:
        """Marks Healthy the lost GPUs that answer again."""
        for uuid in sorted(self.lost):
            if self._answers(uuid):
                self.lost.discard(uuid)
                self.handle(GpuRecovered(uuid))

    def run(self) -> None:
        try:
            while not self._stop.is_set():
                self.recover()
                for event in self._driver_call(self.source.wait, RECOVERY_POLL_SECONDS if self.lost else 1.0):
                    self.handle(event)
        finally:
            close = getattr(self.source, "close", None)
            if close is not None:
                close()

    def stop(self) -> None:
        self._stop.set()

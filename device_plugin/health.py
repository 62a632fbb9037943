"""Device health: the Healthy/Unhealthy state every ListAndWatch stream reports, and what changes it.

DeviceHealth holds the state (by device UUID) and wakes every waiting stream at once on a change, so
each change reaches the kubelet without delay. HealthWatcher turns driver events into changes, as
NVIDIA's plugin does: a critical XID on a GPU marks the GPU and its MIG devices Unhealthy; the
application XIDs (APPLICATION_XIDS: errors of one program, not of the GPU) change nothing;
DP_DISABLE_HEALTHCHECKS=all (or xids) turns the checks off, a list of numbers ignores those XIDs too.
Beyond NVIDIA's (whose devices never come back), a device whose GPU answers NVML again after a
reset is to be marked Healthy again.

NOT DONE YET: the events themselves. They are to come from NVML (nvmlEventSetCreate,
nvmlDeviceRegisterEvents, nvmlEventSetWait_v2, nvmlEventSetFree) through cdi's NVML binding, which
does not make those calls yet (nor does the simulated driver answer them). `nvml_event_source`
therefore returns None and the plugin runs without health checks, saying so once in its log; the
watcher takes any EventSource (one `wait(timeout)` call), so the NVML one plugs in unchanged.
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

    def health(self, uuid: str) -> str:
        with self._changed:
            return UNHEALTHY if uuid in self._unhealthy else HEALTHY

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


class EventSource(Protocol):
    def wait(self, timeout: float) -> list[XidEvent]: ...


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
    """Applies the events of source to health: a critical XID on a GPU marks devices_of(gpu_uuid)."""

    def __init__(self, source: EventSource, health: DeviceHealth, devices_of, ignored: frozenset[int]):
        self.source, self.health, self.devices_of, self.ignored = source, health, devices_of, ignored
        self._stop = threading.Event()

    def handle(self, event: XidEvent) -> bool:
        if event.xid in self.ignored:
            return False
        return self.health.set_healthy(self.devices_of(event.gpu_uuid), False)

    def run(self) -> None:
        while not self._stop.is_set():
            for event in self.source.wait(1.0):
                self.handle(event)

    def stop(self) -> None:
        self._stop.set()


def nvml_event_source(driver_root: str) -> EventSource | None:
    """NVML's XID events for the GPUs of driver_root: not available yet (see the module's docstring)."""
    return None

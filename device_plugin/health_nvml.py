"""The driver's health events, read from NVML through cdi's binding as NVIDIA's plugin reads them.

NvmlEventSource registers every GPU NVML lists for nvmlEventTypeXidCriticalError (and the ECC types, as
NVIDIA's plugin asks, masked by nvmlDeviceGetSupportedEventTypes) in one event set, and each
`wait(timeout)` is one nvmlEventSetWait_v2: an XID event becomes an XidEvent (a MIG event, one whose
gpuInstanceId/computeInstanceId are not 0xFFFFFFFF, names its GPU and compute instance); other event
types are skipped. The event's device handle names the GPU, so an event from a GPU that is lost by
the time it is read (XID 79) still names it.

The plugin runs it in a child process (device_plugin.nvml_child `events`, read by
device_plugin.health_child.ChildEventSource), so that a driver crashing or hanging in an event call ends
the child, not the plugin.

`answers(uuid)` asks NVML about a GPU (nvmlDeviceGetHandleByUUID, nvmlDeviceGetUUID): the watcher's
recovery of a lost GPU (device_plugin.health.HealthWatcher) asks it.
"""
from __future__ import annotations

from cdi.log import get_logger
from device_plugin.health import GpuLost, HealthEvent, XidEvent

LOG = get_logger("nvidia-device-plugin")
EVENT_XID_CRITICAL_ERROR = 0x8          # nvmlEventTypeXidCriticalError
EVENT_ECC = 0x1 | 0x2                   # nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError
WHOLE_GPU = 0xFFFFFFFF                  # gpuInstanceId/computeInstanceId of an event about the whole GPU


class NvmlEventSource:
    """One NVML event set over the GPUs of an initialised cdi.nvml_binding.NvmlLibrary."""

    def __init__(self, nvml):
        from cdi.nvml_binding import NvmlCallError, handle_address

        self.nvml = nvml
        self.event_set = nvml.event_set_create()
        self.gpus: dict[int, str] = {}   # handle address -> GPU UUID
        for index in range(nvml.device_count()):
            try:
                handle = nvml.device_handle_by_index(index)
                uuid = nvml.device_uuid(handle)
                mask = (EVENT_XID_CRITICAL_ERROR | EVENT_ECC) & nvml.device_supported_event_types(handle)
                nvml.device_register_events(handle, mask, self.event_set)
            except NvmlCallError as e:
                LOG.warning("no health events from GPU %d: %s", index, e)
                continue
            self.gpus[handle_address(handle)] = uuid

    def answers(self, uuid: str) -> bool:
        """NVML answers for the GPU."""
        from cdi.nvml_binding import NvmlCallError

        try:
            return self.nvml.device_uuid(self.nvml.device_handle_by_uuid(uuid)) == uuid
        except NvmlCallError:
            return False

    def wait(self, timeout: float) -> list[HealthEvent]:
        from cdi.nvml_binding import ERROR_TIMEOUT, NvmlCallError

        try:
            data = self.nvml.event_set_wait(self.event_set, max(0, int(timeout * 1000)))
        except NvmlCallError as e:
            if e.code == ERROR_TIMEOUT:
                return []
            # as NVIDIA's: an event set that fails leaves no GPU known to be well
            LOG.error("waiting for NVML events failed: %s; marking every GPU Unhealthy", e)
            return [GpuLost(uuid) for uuid in self.gpus.values()]
        uuid = self.gpus.get(data.device)
        if data.eventType != EVENT_XID_CRITICAL_ERROR or uuid is None:
            return []
        mig = data.gpuInstanceId != WHOLE_GPU and data.computeInstanceId != WHOLE_GPU
        return [XidEvent(uuid, data.eventData, data.gpuInstanceId if mig else None,
                         data.computeInstanceId if mig else None)]

    def close(self) -> None:
        from cdi.nvml_binding import NvmlCallError

        try:
            self.nvml.event_set_free(self.event_set)
        except NvmlCallError:
            pass

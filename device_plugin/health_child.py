"""The plugin's side of the health events' child: device_plugin.nvml_child runs
device_plugin.health_nvml.NvmlEventSource in a child process (`events`) and prints its events one line
each; ChildEventSource starts that child and reads them here, so a driver that crashes or hangs in an event
call ends the child, not the plugin. Its own module, apart from health_nvml, because the child imports
health_nvml and this starts the child.
"""
from __future__ import annotations

from cdi.log import get_logger
from device_plugin.health import GpuLost, HealthEvent, XidEvent
from device_plugin.nvml_child import child_argv

LOG = get_logger("nvidia-device-plugin")


class ChildEventSource:
    """NvmlEventSource run in a child process (device_plugin.nvml_child, `events`), its events read here line
    by line: a driver that crashes (SIGSEGV) in an event call ends the child, not the plugin, and one that
    hangs there stops the child's ticks. Either is one error line, and, as for a failing wait, every GPU is
    then Unhealthy (no GPU is known to be well); the next start of the plugins makes a new child."""

    def __init__(self, driver_root: str, timeout: float):
        import subprocess

        self.timeout, self.gpus, self.dead = timeout, [], False
        self.process = subprocess.Popen(child_argv("events", driver_root),
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True)
        self._buffer, self._events = b"", []
        # uuid -> (answers, when): the answer to a request, and the one the child gives with each XID
        self._answers: dict[str, tuple[bool, float]] = {}
        self._told: dict[str, tuple[bool, float]] = {}
        self._last_line = self._now()
        ready = self._line(timeout)
        if ready is None or not ready.startswith("ready"):
            self.close()
            raise RuntimeError(self._why_gone("while making the event set") if ready is None
                               else f"unexpected answer {ready[:80]!r}")
        self.gpus = ready.split()[1:]

    @staticmethod
    def _now() -> float:
        import time

        return time.monotonic()

    def _why_gone(self, doing: str) -> str:
        import signal

        from cdi.nvml import NVML_TIMEOUT_ENV

        status = self.process.poll()
        if status is None:
            return (f"NVML did not answer in {self.timeout:g} s {doing} (the driver hangs; {NVML_TIMEOUT_ENV} "
                    "sets the limit)")
        if status < 0:
            return f"the NVML library crashed ({signal.Signals(-status).name}) {doing}"
        return f"the health events' reader ended (status {status}) {doing}"

    def _line(self, timeout: float) -> str | None:
        """The child's next line within timeout; None at its end or past timeout."""
        import os
        import select

        deadline = self._now() + timeout
        fd = self.process.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - self._now()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            data = os.read(fd, 65536)
            if not data:
                return None
            self._buffer += data
        line, self._buffer = self._buffer.split(b"\n", 1)
        self._last_line = self._now()
        return line.decode(errors="replace")

    def _take(self, line: str) -> None:
        what, *fields = line.split()
        if what == "xid" and len(fields) == 4:
            gi, ci = (None if f == "-" else int(f) for f in fields[2:])
            self._events.append(XidEvent(fields[0], int(fields[1]), gi, ci))
        elif what == "lost" and fields:
            self._events.append(GpuLost(fields[0]))
        elif what == "answers" and len(fields) == 2:
            self._answers[fields[0]] = self._told[fields[0]] = (fields[1] == "1", self._now())

    def _gone(self, doing: str) -> list[HealthEvent]:
        """The child died or hangs: one error line, every GPU Unhealthy, no more events."""
        why = self._why_gone(doing)
        self.close()
        self.dead = True
        LOG.error("health checks ended: %s; marking every GPU Unhealthy until the plugins start again", why)
        return [GpuLost(uuid) for uuid in self.gpus]

    def wait(self, timeout: float) -> list[HealthEvent]:
        if self.dead:
            import time

            time.sleep(timeout)
            return []
        deadline = self._now() + timeout
        while not self._events and self._now() < deadline:
            line = self._line(deadline - self._now())
            if line is None:
                if self.process.poll() is not None:
                    return self._gone("reading the health events")
                if self._now() - self._last_line > self.timeout:
                    return self._gone("waiting for health events")
                continue
            self._take(line)
        events, self._events = self._events, []
        return events

    def answers(self, uuid: str) -> bool:
        """NVML answers for the GPU (asked through the child; False when it does not say in time)."""
        if self.dead:
            return False
        told = self._told.pop(uuid, None)
        if told is not None and self._now() - told[1] < 1.0:   # told with its XID, just now
            return told[0]
        self._answers.pop(uuid, None)   # an older line (an XID's) is no answer to this request
        try:
            self.process.stdin.write(f"answers {uuid}\n".encode())
            self.process.stdin.flush()
        except OSError:
            return False
        deadline = self._now() + self.timeout
        while uuid not in self._answers and self._now() < deadline:
            line = self._line(deadline - self._now())
            if line is None:
                break
            self._take(line)
        return self._answers.pop(uuid, (False, 0.0))[0]

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            try:
                pipe.close()
            except OSError:
                pass


def nvml_event_source(driver_root: str) -> ChildEventSource | None:
    """The NVML event source of driver_root's GPUs, read by a child (ChildEventSource); None (and one
    warning) when NVML cannot give one."""
    from cdi.nvml import nvml_timeout

    try:
        source = ChildEventSource(driver_root, nvml_timeout())
        LOG.info("health checks on: NVML events of %d GPUs", len(source.gpus))
        return source
    except Exception as e:   # health checks are worth having, never a reason to stop serving
        LOG.warning("health checks off: NVML gives no events (%s)", e)
        return None

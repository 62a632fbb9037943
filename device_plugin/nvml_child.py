"""NVML read in a child process with a deadline, for what `gct-nvml-inventory` does not print: the node-label
facts (MIG attributes) and the GPU topology (GetPreferredAllocation), both read by one child at each
start of the plugins (ChildRead); and the health events, read by a child that stays (`events`,
device_plugin.health_child.ChildEventSource).

Why: a driver whose library hangs in a call (nvmlInit, a topology call) or crashes (SIGSEGV) must not
hang or kill the plugin. In this process a hang could only be bounded by ending the whole program
(cdi.nvml's watchdog), and a crash would end it with no line at all. Here the child is killed at the
deadline (NVIDIA_CTK_NVML_TIMEOUT, default 60 s, from the child's start) and either case is one NvmlError
line naming what was being read; the plugin then serves without it (unknown topology, no labels written),
and `nvidia-device-plugin labels` ends with that line (or, long-running, says it and tries again).

    python -I -S -c '<sys.path of the plugin>; nvml_child.main' read DRIVER_ROOT   (child_argv; stdin:
    the pickled list of (reader, arguments))

The child runs the readers one after the other, in the order asked, and writes each one's answer as soon
as it has it: a frame of an 8-byte length and the pickled (reader, True, answer) or (reader, False, one
error line). So one start pays one interpreter and one NVML load, and an answer read before a later
reader hangs is still used. Only this module's own child is unpickled: it is the same program, started
here.
"""
from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import threading
import time

from cdi.errors import CdiError


def _topology(driver_root: str, gpu_indices: list[int]):
    from cdi.nvml_topology import read_links

    return read_links(driver_root, gpu_indices)


def _label_facts(driver_root: str, machine_type_file: str, inventory):
    from device_plugin.labels import read_facts

    return read_facts(driver_root, machine_type_file, inventory)


READERS = {"topology": (_topology, "the GPU topology"), "label-facts": (_label_facts, "the node-label facts")}
FRAME_HEAD = 8   # bytes of a frame's length, big-endian


def child_argv(what: str, driver_root: str) -> list[str]:
    """The child's command line: this interpreter, isolated (-I: no PYTHONPATH, user site or current folder
    on its path, so nothing in the folder the plugin runs from is imported; -S: no site, as the launchers
    start it), given this process's own import path, so it finds this module however the toolkit is
    installed."""
    boot = (f"import sys; sys.path[:0] = {[p for p in sys.path if p]!r}; "
            "from device_plugin.nvml_child import main; sys.exit(main(sys.argv[1:]))")
    return [sys.executable, "-I", "-S", "-c", boot, what, driver_root]


class ChildRead:
    """Readers (READERS name -> its arguments, run in that order) started in one child: `result(name)`
    waits for that reader's answer, by the deadline counted from the start."""

    def __init__(self, reads: dict[str, tuple], driver_root: str, timeout: float | None = None):
        from cdi.nvml import nvml_timeout

        self.order, self.driver_root = list(reads), driver_root
        self.timeout = nvml_timeout() if timeout is None else timeout
        self.deadline = time.monotonic() + self.timeout
        self._answers: dict[str, tuple[bool, object]] = {}
        self._ended, self._timed_out, self._start_error = False, False, None
        self._stderr: list[bytes] = []
        self._changed = threading.Condition()
        try:
            # a fresh interpreter, not a fork: the plugin has gRPC's threads, which a fork does not carry over
            self.process = subprocess.Popen(child_argv("read", driver_root), stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, close_fds=True)
        except OSError as e:
            self.process, self._ended, self._start_error = None, True, e
            return
        # read as the child writes, so it never waits on a full pipe while the caller does the rest of its start
        self._readers = [threading.Thread(target=self._collect, args=(pickle.dumps(list(reads.items())),),
                                          name="nvml-child-read", daemon=True),
                         threading.Thread(target=lambda: self._stderr.append(self.process.stderr.read()),
                                          name="nvml-child-stderr", daemon=True)]
        for thread in self._readers:
            thread.start()

    def _collect(self, request: bytes) -> None:
        try:
            self.process.stdin.write(request)
            self.process.stdin.close()
        except OSError:   # the child is already gone: its status says why
            pass
        out = self.process.stdout
        while True:
            head = out.read(FRAME_HEAD)
            if len(head) < FRAME_HEAD:
                break
            size = int.from_bytes(head, "big")
            body = out.read(size)
            if len(body) < size:
                break
            name, ok, value = pickle.loads(body)
            with self._changed:
                self._answers[name] = (ok, value)
                self._changed.notify_all()
        self.process.wait()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def result(self, name: str):
        """The reader's answer; cdi.nvml.NvmlError (one line) when it failed, or the child hung (it is then
        killed), crashed or could not start before answering it."""
        from cdi.nvml import NVML_TIMEOUT_ENV, NvmlError

        where = f"driver root {self.driver_root}"
        with self._changed:
            self._changed.wait_for(lambda: name in self._answers or self._ended,
                                   timeout=max(0.0, self.deadline - time.monotonic()))
            answer, ended = self._answers.get(name), self._ended
        if answer is not None:
            ok, value = answer
            if ok:
                return value
            raise NvmlError(f"reading {READERS[name][1]} failed: {value}", where)
        if self._start_error is not None:
            raise NvmlError(f"cannot start the NVML reader ({sys.executable}): {self._start_error.strerror}", where)
        if not ended:
            self._timed_out = True
            self.cancel()
        stuck_in = READERS[next((n for n in self.order if n not in self._answers), name)][1]
        if self._timed_out:
            raise NvmlError(f"NVML did not answer in {self.timeout:g} s while reading {stuck_in} (the driver "
                            f"hangs; {NVML_TIMEOUT_ENV} sets the limit)", where)
        status = self.process.returncode
        if status < 0:
            raise NvmlError(f"the NVML library crashed ({signal.Signals(-status).name}) while reading {stuck_in}",
                            where)
        self._readers[1].join()   # the child has ended: its stderr is read to the end (its last line)
        lines = b"".join(self._stderr).decode(errors="replace").strip().splitlines()
        raise NvmlError(f"reading {stuck_in} failed: {lines[-1] if lines else f'exit status {status}'}", where)

    def cancel(self) -> None:
        """Ends the child (if it still runs) and waits for it."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.kill()
        for thread in self._readers:
            thread.join()


def read_in_child(what: str, driver_root: str, *args, timeout: float | None = None):
    """One reader's answer, read in a child of its own."""
    return ChildRead({what: args}, driver_root, timeout=timeout).result(what)


# --- the health events: a child that stays, its events one line each -----------------------------------

EVENT_WAIT_SECONDS = 0.05  # one nvmlEventSetWait_v2 of the child: how soon it reads a request in between
TICK_SECONDS = 0.5         # how often it says it is alive (the plugin's hang limit is NVIDIA_CTK_NVML_TIMEOUT)


def _events_loop(driver_root: str) -> None:
    """The child of ChildEventSource: makes NVML's event set, says `ready UUID...`, then for ever prints
    `xid UUID XID GI CI` (`-` for a whole GPU, after `answers UUID 1|0` for it), `lost UUID` and every
    TICK_SECONDS `tick`; a line
    `answers UUID` on stdin is answered `answers UUID 1|0`. Ends when stdin closes (the plugin is gone)."""
    import select
    import time

    from cdi.nvml import in_process
    from device_plugin.health import GpuLost
    from device_plugin.health_nvml import NvmlEventSource

    def say(line: str) -> None:
        try:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        except OSError:   # the plugin is gone (or stopped its watcher): so is this child, quietly
            os._exit(0)

    with in_process(driver_root, bounded=False) as nvml:   # bounded by the parent, which kills this child
        source = NvmlEventSource(nvml)
    say(" ".join(["ready", *source.gpus.values()]))
    pending, ticked = b"", time.monotonic()
    while True:
        if select.select([0], [], [], 0)[0]:
            data = os.read(0, 4096)
            if not data:
                os._exit(0)
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                what, _, uuid = line.decode(errors="replace").partition(" ")
                if what == "answers":
                    say(f"answers {uuid} {1 if source.answers(uuid) else 0}")
        for event in source.wait(EVENT_WAIT_SECONDS):
            if isinstance(event, GpuLost):
                say(f"lost {event.gpu_uuid}")
            else:
                # whether the GPU still answers, before the XID: the plugin asks it for every critical XID,
                # and a request would wait for this child's next wait to end
                say(f"answers {event.gpu_uuid} {1 if source.answers(event.gpu_uuid) else 0}")
                say(f"xid {event.gpu_uuid} {event.xid} {'-' if event.gi is None else event.gi} "
                    f"{'-' if event.ci is None else event.ci}")
        if time.monotonic() - ticked >= TICK_SECONDS:
            say("tick")
            ticked = time.monotonic()


def _read(driver_root: str) -> None:
    """The child of ChildRead: each asked reader's answer, or its one error line, as a frame on stdout."""
    reads = pickle.loads(sys.stdin.buffer.read())
    for name, args in reads:
        try:
            frame = (name, True, READERS[name][0](driver_root, *args))
        except CdiError as e:
            frame = (name, False, str(e))
        except Exception as e:   # the parent turns it into its one line
            frame = (name, False, f"{type(e).__name__}: {e}")
        body = pickle.dumps(frame)
        sys.stdout.buffer.write(len(body).to_bytes(FRAME_HEAD, "big") + body)
        sys.stdout.buffer.flush()


def main(argv: list[str]) -> int:
    what, driver_root = argv
    if what == "events":
        _events_loop(driver_root)
        return 0
    _read(driver_root)
    os._exit(0)   # no NVML shutdown or interpreter teardown to hang in: the answers are out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

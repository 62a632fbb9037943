"""The GPUs and MIG devices of a host, read through NVML from a driver root.

NVML is read by `gct-nvml-inventory` (nvml_inventory/nvml_inventory.c), the small C program installed
in the installation's libexec/ (beside the launchers' bin/: libexec_dir), which loads the library in a child process of its own and prints every answer,
one line each (the transcript, see inventory_from_transcript); this module turns those lines into an
Inventory. So a library that never finishes loading (a constructor that hangs, which no thread of this
process could interrupt: the loader holds its lock and cffi's dlopen the interpreter's), an nvmlInit
that never returns, or one that crashes (SIGSEGV, SIGBUS) is one error line naming the library, where
it was and the limit (NVIDIA_CTK_NVML_TIMEOUT), never a hung or killed program. Where that program is
not installed (Python run from a bare checkout), NVML is read in this process (cdi.nvml_binding) under
a watchdog thread, which cannot bound a hang inside dlopen nor survive a crash.

For a driver root other than "/", the root's own libnvidia-ml.so.1 is given by absolute path (resolved
inside the root); for "/", the loader finds it by soname. The library file is checked first (a regular
file, a whole ELF shared object): a FIFO or a truncated file is its own error line.

Importing this module is cheap (the binding is imported only when read in this process): the runtime
shim may use it on a container's start path.
"""
from __future__ import annotations

import _thread
import os

from cdi.driver_root import DriverRoot, DriverRootError
from cdi.errors import CdiError
from cdi.inventory import Gpu, Inventory, MigDevice

NVML_SONAME = "libnvidia-ml.so.1"
# What to do when the driver is not found (the driver root: `cdi generate --driver-root`, config
# nvidia-container-cli.root; a containerised driver lives under e.g. /run/nvidia/driver).
NO_DRIVER_HINT = ("install the NVIDIA driver, or give the root it is installed under (--driver-root; "
                  "config.toml nvidia-container-cli.root)")
# The C program that reads NVML and prints the transcript (nvml_inventory/nvml_inventory.c), an internal
# helper installed off PATH, in <prefix>/libexec beside the launchers' <prefix>/bin (libexec_dir):
# load_inventory runs it, and so does the static launcher, which cannot dlopen.
NVML_INVENTORY_PROGRAM = "gct-nvml-inventory"
LIBEXEC = "libexec"
NVML_TIMEOUT_ENV = "NVIDIA_CTK_NVML_TIMEOUT"
DEFAULT_NVML_TIMEOUT = 60.0
MAX_NVML_TIMEOUT = 3600.0
DEVICE_MIG_ENABLE = 1   # nvmlDeviceGetMigMode's current mode when MIG is on
# Where driver installations put their libraries, first match wins.
LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/lib/x86_64-linux-gnu", "/lib64", "/usr/lib", "/lib")

# nvmlBrandType_t -> the brand names NVIDIA_REQUIRE_BRAND and the real toolkit use
BRANDS = {0: "Unknown", 1: "Quadro", 2: "Tesla", 3: "NVS", 4: "Grid", 5: "GeForce", 6: "Titan",
          7: "NvidiaVApps", 8: "NvidiaVPC", 9: "NvidiaVCS", 10: "NvidiaVWS", 11: "NvidiaCloudGaming",
          12: "QuadroRTX", 13: "NvidiaRTX", 14: "Nvidia", 15: "GeForceRTX", 16: "TitanRTX"}
ARCHITECTURES = {2: "Kepler", 3: "Maxwell", 4: "Pascal", 5: "Volta", 6: "Turing", 7: "Ampere", 8: "Ada",
                 9: "Hopper", 10: "Blackwell"}


class NvmlError(CdiError):
    """No usable NVIDIA driver, or NVML failed while reading the inventory."""


def find_nvml_library(root: DriverRoot) -> str | None:
    """Host path of the root's libnvidia-ml.so.1, resolved inside the root; None if it has none. The
    root's library_search_paths (`cdi generate --library-search-path`) are searched after the usual folders."""
    for directory in (*LIBRARY_DIRS, *root.library_search_paths):
        resolved = root.resolve(f"{directory}/{NVML_SONAME}")
        if resolved is not None:
            return root.host_path(resolved)
    return None


def library_to_load(root: DriverRoot) -> str:
    """What to dlopen for root, checked (check_library): the library's host path, or for root "/" the
    soname, for the loader to search as NVIDIA's tools do (the file the usual directories hold, which is
    what it finds with every distribution's driver packages, is checked), unless library_search_paths
    were given: then the file found, which the loader's own search might not reach."""
    try:
        path = find_nvml_library(root)
    except DriverRootError as e:
        raise NvmlError(e.what, e.where) from None
    if path is not None:
        check_library(path)
    if root.path == "/" and not (path and root.library_search_paths):
        return NVML_SONAME
    if path is None:
        raise NvmlError(f"no NVIDIA driver: {NVML_SONAME} not found in the driver root; {NO_DRIVER_HINT}",
                        root.path)
    return path


def libexec_dir(bin_dir: str) -> str:
    """The internal helpers' folder of the installation whose programs are in bin_dir: <prefix>/libexec
    beside <prefix>/bin (a venv's, the package's /usr/lib/gpu-container-toolkit/libexec, the folder pip
    installs the wheel's libexec data into, beside the scripts' bin/)."""
    return os.path.join(os.path.dirname(os.path.normpath(bin_dir)), LIBEXEC)


def inventory_program(bin_dir: str | None = None) -> str | None:
    """gct-nvml-inventory of the installation whose programs are in bin_dir (the runtime shim's: its
    launcher's folder), else of this interpreter's (the venv's or the package's bin), else in the
    libexec/ of the install scheme's data folder (a wheel installed into a system interpreter:
    /usr/local/libexec); None when it is not there. Never looked up in PATH: root programs run it."""
    import sys

    for folder in (bin_dir, os.path.dirname(sys.executable) if sys.executable else None):
        if folder:
            program = os.path.join(libexec_dir(folder), NVML_INVENTORY_PROGRAM)
            if os.access(program, os.X_OK):
                return program
    import sysconfig   # only here: ~1 ms, and the installations above are the usual ones

    program = os.path.join(sysconfig.get_path("data"), LIBEXEC, NVML_INVENTORY_PROGRAM)
    return program if os.access(program, os.X_OK) else None


class _NvmlState:
    lock = _thread.allocate_lock()   # the builtin lock: `import threading` costs ~5 ms on a hook's start
    root: str | None = None          # the driver root NVML was loaded from in this process (in-process reading)
    library = None                   # its cdi.nvml_binding.NvmlLibrary, initialised
    loaded: dict[str, str] = {}      # driver root -> what was given to dlopen for it (loaded_library)


def _initialise(root: DriverRoot, path: str):
    """Load (path: library_to_load's) and initialise NVML in this process, once: returns the NvmlLibrary."""
    with _NvmlState.lock:
        if _NvmlState.root is not None:
            if _NvmlState.root != root.path:
                raise NvmlError(f"NVML is already loaded from driver root {_NvmlState.root} in this process",
                                root.path)
            return _NvmlState.library
        from cdi.nvml_binding import NvmlCallError, load_library

        try:
            library = load_library(path)
        except NvmlCallError as e:
            if path == NVML_SONAME:
                raise NvmlError(f"no NVIDIA driver: {NVML_SONAME} is not installed; {NO_DRIVER_HINT}",
                                f"driver root {root.path}") from None
            raise NvmlError(f"cannot load the NVML library: {e}", path) from None
        try:
            library.init()
        except NvmlCallError as e:
            raise NvmlError(f"NVML initialisation failed: {e}", path) from None
        _NvmlState.root, _NvmlState.library = root.path, library
        return library


def check_library(path: str) -> None:
    """NvmlError unless path is a regular file holding a whole ELF shared object: opened with
    O_NONBLOCK (a FIFO there would block dlopen forever), and every byte its headers promise present
    (a truncated library is a SIGBUS inside dlopen or at the first call). ~0.05 ms."""
    import stat

    from cdi.elf import ElfError, check_loadable

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as e:
        raise NvmlError(f"cannot open the NVML library: {e.strerror}", path) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NvmlError("the NVML library is not a regular file", path)
        check_loadable(fd, path)
    except ElfError as e:
        raise NvmlError(f"the NVML library is unusable: {e.what}", path) from None
    finally:
        os.close(fd)


MIG_MINORS = "driver/nvidia-caps/mig-minors"     # under the driver's proc
MAX_MIG_MINORS_BYTES = 1 << 20
DEFAULT_MIG_CONTROL_MINORS = {"config": 1, "monitor": 2}


def _read_mig_minors_file(path: str) -> bytes | None:
    """The first MiB of the mig-minors file; None when there is none."""
    try:
        with open(path, "rb") as f:
            return f.read(MAX_MIG_MINORS_BYTES)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise NvmlError(f"cannot read MIG capability minors: {e.strerror}", path) from None


def _mig_minor_entries(data: bytes | None) -> list[tuple[str, int]]:
    """(key, minor) of every mig-minors line whose value is an ASCII number ("gpu0/gi1/access 12",
    "config 1"); None (no file) gives []. The driver writes ASCII: any other byte is read as U+FFFD,
    so its line matches nothing and is skipped."""
    if data is None:
        return []
    text = data.decode("ascii", "replace")   # bytes.decode("ascii") needs no codec module (a text file's does)
    entries = []
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        value = value.strip()
        if value.isascii() and value.isdigit():   # isdigit alone takes '²', which int() refuses
            entries.append((key, int(value)))
    return entries


def read_mig_minors(path: str) -> dict[tuple[int, int, int | None], int]:
    """Parse mig-minors: (gpu minor, gi, ci or None for the GI's own file) -> capability minor.
    A missing file gives {} (callers then use the real drivers' fixed layout)."""
    return _parse_mig_minors(_read_mig_minors_file(path))


def _parse_mig_minors(data: bytes | None) -> dict[tuple[int, int, int | None], int]:
    minors: dict[tuple[int, int, int | None], int] = {}
    for key, minor in _mig_minor_entries(data):
        parts = key.split("/")
        if len(parts) not in (3, 4) or parts[-1] != "access":
            continue  # "config N", "monitor N" and anything unknown
        try:
            gpu, gi = int(parts[0].removeprefix("gpu")), int(parts[1].removeprefix("gi"))
            ci = int(parts[2].removeprefix("ci")) if len(parts) == 4 else None
        except ValueError:
            continue
        minors[(gpu, gi, ci)] = minor
    return minors


def read_mig_control_minors(path: str) -> dict[str, int]:
    """The minors of the MIG `config` and `monitor` capabilities (absent: the fixed 1 and 2)."""
    minors = dict(DEFAULT_MIG_CONTROL_MINORS)
    minors.update((key, minor) for key, minor in _mig_minor_entries(_read_mig_minors_file(path)) if key in minors)
    return minors


def _cuda_version(value: int) -> str:
    return f"{value // 1000}.{(value % 1000) // 10}"


def load_inventory(driver_root: DriverRoot | str | None = None, transcript: list[str] | None = None,
                   bin_dir: str | None = None) -> Inventory:
    """Driver and CUDA versions, every visible GPU and its MIG devices, as this process sees them.

    The library file is checked (check_library), then read by gct-nvml-inventory (inventory_program,
    bin_dir as there) in NVIDIA_CTK_NVML_TIMEOUT seconds (default 60): a library or driver that hangs
    while loading, in nvmlInit or in any call, or crashes, ends in an NvmlError naming the library and
    where it was. Without that program, NVML is read in this process under a watchdog thread, which
    ends the program with one line when a call never returns (not one inside dlopen).

    transcript: when a list, every answer the inventory is made of is appended to it, one line each
    (inventory_from_transcript), the mig-minors line being of the file as this process read it: the
    lines `gct-nvml-inventory` prints, so that the launcher can tell, without Python, that the driver
    still answers what this inventory was made of (runtime_shim.create_cache, jit-cdi mode)."""
    root = driver_root if isinstance(driver_root, DriverRoot) else DriverRoot(driver_root or "/")
    timeout = nvml_timeout()
    library = library_to_load(root)
    minors_file = _read_mig_minors_file(root.proc_path(MIG_MINORS))
    minors_line = _mig_minors_line(minors_file)
    program = inventory_program(bin_dir)
    if program is not None:
        # the program bounds itself; the watchdog only if it did not (a margin, so that its line comes first)
        with _Watchdog(timeout + PROGRAM_MARGIN, f"{NVML_INVENTORY_PROGRAM}, driver root {root.path}"):
            lines = _run_inventory_program(program, root, library, timeout)
        lines = [minors_line if line.startswith("mig-minors ") else line for line in lines]
        where = program
    else:
        with _Watchdog(timeout, f"driver root {root.path}"):
            lines = _read_in_process(root, library, minors_line)
        where = f"driver root {root.path}"
    _NvmlState.loaded[root.path] = library
    if transcript is not None:
        transcript.extend(lines)
    return inventory_from_transcript(lines, _parse_mig_minors(minors_file), where)


def loaded_library(root: DriverRoot) -> str | None:
    """What was given to dlopen for root (the soname for "/", where the loader searches; else the
    library's host path), as `gct-nvml-inventory` takes it; None when NVML was not read for root."""
    return _NvmlState.loaded.get(root.path)


# Seconds the watchdog gives gct-nvml-inventory beyond the limit it was given (it ends itself then)
PROGRAM_MARGIN = 5.0
PROGRAM_ERROR_PREFIX = f"{NVML_INVENTORY_PROGRAM}: error: "
STATUS_CANNOT_LOAD = 4   # its exit status when dlopen failed (nvml_inventory.c)
MAX_PROGRAM_OUTPUT = 16 << 20


def _run_inventory_program(program: str, root: DriverRoot, library: str, timeout: float) -> list[str]:
    """The transcript gct-nvml-inventory prints for library; its error line as an NvmlError. Run with no
    environment and stdin on /dev/null, as the launcher runs it; stdout and stderr on one pipe (it
    writes one of them, and only after its child, the library's, has ended)."""
    read_end, write_end = os.pipe()
    try:
        pid = os.posix_spawn(program, [program, library, root.proc_path(MIG_MINORS), f"{timeout:f}"], {},
                             file_actions=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                                           (os.POSIX_SPAWN_DUP2, write_end, 1),
                                           (os.POSIX_SPAWN_DUP2, write_end, 2)])
    except OSError as e:
        os.close(read_end)
        raise NvmlError(f"cannot run {NVML_INVENTORY_PROGRAM}: {e.strerror}", program) from None
    finally:
        os.close(write_end)
    chunks, size = [], 0
    try:
        while size <= MAX_PROGRAM_OUTPUT and (chunk := os.read(read_end, 1 << 16)):
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(read_end)
    status = os.waitpid(pid, 0)[1]
    output = b"".join(chunks).decode(errors="replace")   # as the binding decodes the library's texts
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        return output.split("\n")[:-1]
    line = output.rstrip("\n")
    if "\n" in line or not line.startswith(PROGRAM_ERROR_PREFIX) or not line.endswith(")"):
        how = (f"exit status {os.WEXITSTATUS(status)}" if os.WIFEXITED(status)
               else f"killed by signal {os.WTERMSIG(status)}")
        raise NvmlError(f"{NVML_INVENTORY_PROGRAM} failed ({how}) without its error line", program)
    what, _, where = line.removeprefix(PROGRAM_ERROR_PREFIX)[:-1].rpartition(" (")
    if os.WEXITSTATUS(status) == STATUS_CANNOT_LOAD and library == NVML_SONAME:
        raise NvmlError(f"no NVIDIA driver: {NVML_SONAME} is not installed; {NO_DRIVER_HINT}",
                        f"driver root {root.path}")
    raise NvmlError(what, where)


def _mig_minors_line(data: bytes | None) -> str:
    """The transcript's line for the mig-minors file's first MiB: zlib.crc32 and size, or absent."""
    if data is None:
        return "mig-minors absent"
    import zlib   # built in: ~0.1 ms

    return f"mig-minors {zlib.crc32(data)} {len(data)}"


def inventory_from_transcript(lines: list[str], cap_minors: dict, where: str) -> Inventory:
    """The Inventory a transcript tells (cap_minors: read_mig_minors' of the driver's file). A line names
    an answer and gives it: numbers in decimal, a text last on its line as the library wrote it (so one
    that holds a newline makes a transcript that is refused here, as no launcher could match it):
        driver-version <text>                   cuda-driver-version <n>
        mig-minors <crc32> <size> | mig-minors absent     (the file's first MiB: zlib.crc32, bytes)
        device-count <n>
        gpu <i> minor <n>                       gpu <i> compute-capability <major> <minor>
        gpu <i> architecture <n>|not-supported  gpu <i> mig-mode <current>|not-supported
        gpu <i> gi-profile <index> id <id> slices <n> memory <MB> name <text> | gpu <i> gi-profile <index> none
        gpu <i> max-mig-devices <n>
        gpu <i> mig <slot> none | gpu <i> mig <slot> gi <gi> ci <ci> gi-profile-id <id> ci-profile-id <id>
            ci-slices <n> memory <bytes> uuid <text>
        gpu <i> uuid <text>   gpu <i> name <text>   gpu <i> brand <n>   gpu <i> pci-bus-id <text>
        gpu <i> memory <bytes>
    in that order (the gi-profile and mig lines only for a GPU whose mig-mode is 1)."""
    top: dict[str, str] = {}
    gpus: dict[int, dict] = {}
    try:
        for line in lines:
            key, _, rest = line.partition(" ")
            if key != "gpu":
                if key not in ("driver-version", "cuda-driver-version", "mig-minors", "device-count"):
                    raise ValueError(line)
                top[key] = rest
                continue
            index, what, value = rest.split(" ", 2) if rest.count(" ") >= 2 else (*rest.split(" "), "")
            gpu = gpus.setdefault(int(index), {"gi-profile": [], "mig": []})
            if what in ("gi-profile", "mig"):
                gpu[what].append(value)
            elif what in ("minor", "compute-capability", "architecture", "mig-mode", "max-mig-devices", "uuid",
                          "name", "brand", "pci-bus-id", "memory"):
                gpu[what] = value
            else:
                raise ValueError(line)
        return Inventory(driver_version=top["driver-version"],
                         cuda_version=_cuda_version(int(top["cuda-driver-version"])),
                         gpus=tuple(_gpu_from_transcript(index, gpus[index], cap_minors)
                                    for index in range(int(top["device-count"]))))
    except (KeyError, IndexError, ValueError) as e:
        raise NvmlError(f"an NVML answer that cannot be read: {str(e)[:200]!r}", where) from None


def _profile(name: str, slices: int, memory_mb: int) -> tuple[str, int]:
    """A GPU instance profile's (name such as "3g.20gb", compute slices)."""
    name = name.removeprefix("MIG ")
    if not name:  # drivers without profile names: build it the way nvidia-smi shows it
        name = f"{slices}g.{round(memory_mb / 1024)}gb"
    return name, slices


def _gpu_from_transcript(index: int, gpu: dict, cap_minors) -> Gpu:
    minor = int(gpu["minor"])
    major, minor_cc = gpu["compute-capability"].split(" ")
    architecture = None if gpu["architecture"] == "not-supported" else int(gpu["architecture"])
    mig_enabled = gpu["mig-mode"] != "not-supported" and int(gpu["mig-mode"]) == DEVICE_MIG_ENABLE
    profiles = {}
    for entry in gpu["gi-profile"]:
        fields = entry.split(" ", 8)
        if fields[1:] != ["none"]:
            profiles[int(fields[2])] = _profile(fields[8], int(fields[4]), int(fields[6]))
    migs = []
    for entry in gpu["mig"]:
        fields = entry.split(" ", 14)
        if fields[1:] == ["none"]:
            continue  # an empty slot
        slot, gi, ci, gi_profile, ci_slices = (int(fields[n]) for n in (0, 2, 4, 6, 10))
        gi_name, gi_slices = profiles.get(gi_profile, (f"profile{gi_profile}", 0))
        profile = gi_name if ci_slices == gi_slices else f"{ci_slices}c.{gi_name}"
        # the real drivers' fixed layout when the driver has no mig-minors file to read
        gi_cap = cap_minors.get((minor, gi, None), 3 + 135 * minor + 9 * gi)
        ci_cap = cap_minors.get((minor, gi, ci), 3 + 135 * minor + 9 * gi + 1 + ci)
        migs.append(MigDevice(parent_index=index, index=slot, uuid=fields[14], gi=gi, ci=ci, profile=profile,
                              gi_cap_minor=gi_cap, ci_cap_minor=ci_cap, memory_total=int(fields[12])))
    return Gpu(index=index, minor=minor, uuid=gpu["uuid"], name=gpu["name"],
               brand=BRANDS.get(int(gpu["brand"]), "Unknown"), pci_bus_id=gpu["pci-bus-id"],
               architecture=ARCHITECTURES.get(architecture, "Unknown"), compute_capability=f"{major}.{minor_cc}",
               memory_total=int(gpu["memory"]), mig_enabled=mig_enabled, mig_devices=tuple(migs))


def nvml_timeout(environ: dict | None = None) -> float:
    """Seconds NVML gets to answer: $NVIDIA_CTK_NVML_TIMEOUT (a positive number), else 60."""
    value = (os.environ if environ is None else environ).get(NVML_TIMEOUT_ENV, "")
    try:
        seconds = float(value)
    except ValueError:
        return DEFAULT_NVML_TIMEOUT
    return seconds if 0 < seconds <= MAX_NVML_TIMEOUT else DEFAULT_NVML_TIMEOUT


class _Watchdog:
    """Ends the program with one error line (cdi.errors.report_fatal) when the block it guards has not
    finished in `seconds`. A thread, because a call that never returns cannot be interrupted: a signal
    handler written in Python runs only once the call returns. It can end the program only while the
    block lets the interpreter run (a read, a wait, a cffi call; not cffi's dlopen, which keeps the
    interpreter's lock while a library's constructors run). ~0.1 ms. The thread waits on a lock;
    whoever takes `claim` first, the block finishing or the watchdog firing, decides."""

    def __init__(self, seconds: float, where: str):
        self.seconds, self.where = seconds, where
        self.finished, self.claim = _thread.allocate_lock(), _thread.allocate_lock()

    def __enter__(self) -> _Watchdog:
        self.finished.acquire()
        _thread.start_new_thread(self._watch, ())
        return self

    def _watch(self) -> None:
        if self.finished.acquire(timeout=self.seconds) or not self.claim.acquire(blocking=False):
            return
        from cdi.errors import report_fatal

        report_fatal(NvmlError(f"NVML did not answer in {self.seconds:g} s (the driver hangs; "
                               f"{NVML_TIMEOUT_ENV} sets the limit)", self.where))

    def __exit__(self, *exc_info) -> None:
        if not self.claim.acquire(blocking=False):   # the watchdog fired: wait here while it ends the process
            stuck = _thread.allocate_lock()
            stuck.acquire()
            stuck.acquire()
        self.finished.release()


class _Unwatched:
    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        pass


class in_process:
    """`with in_process(driver_root) as nvml:` NVML loaded and initialised in this process (once per
    process; cdi.nvml_binding.NvmlLibrary), the block bounded by NVIDIA_CTK_NVML_TIMEOUT (_Watchdog). For
    long-running readers of what gct-nvml-inventory does not print (topology, events, MIG attributes):
    a hang inside dlopen itself is not bounded here. bounded=False: no watchdog, for a block run in a
    thread of its own whose hang the caller notices itself and must not end the program (the device
    plugin's health events)."""

    def __init__(self, driver_root: DriverRoot | str, bounded: bool = True):
        self.root = driver_root if isinstance(driver_root, DriverRoot) else DriverRoot(driver_root)
        self.watchdog = _Watchdog(nvml_timeout(), f"driver root {self.root.path}") if bounded else _Unwatched()

    def __enter__(self):
        self.watchdog.__enter__()
        try:
            return _initialise(self.root, library_to_load(self.root))
        except BaseException:
            self.watchdog.__exit__()
            raise

    def __exit__(self, *exc_info) -> None:
        self.watchdog.__exit__(*exc_info)


# --- reading NVML in this process (where gct-nvml-inventory is not installed) -----------------------------
# The same calls, in the same order, as nvml_inventory.c, and the same transcript (a test holds the two
# to each other on simulated hosts).

def _read_in_process(root: DriverRoot, library: str, minors_line: str) -> list[str]:
    nvml = _initialise(root, library)
    from cdi.nvml_binding import NvmlCallError

    lines: list[str] = []
    where = "NVML"
    try:
        lines.append(f"driver-version {nvml.system_driver_version()}")
        lines.append(f"cuda-driver-version {nvml.system_cuda_driver_version()}")
        lines.append(minors_line)
        count = nvml.device_count()
        lines.append(f"device-count {count}")
        for index in range(count):
            where = f"GPU {index}"
            _read_gpu(nvml, index, lines)
    except NvmlCallError as e:
        raise NvmlError(f"NVML query failed: {e}", where) from None
    return lines


def _unless_not_supported(read, default):
    """read(), or `default` where the GPU does not support the query (NVML_ERROR_NOT_SUPPORTED)."""
    from cdi.nvml_binding import ERROR_NOT_SUPPORTED, NvmlCallError

    try:
        return read()
    except NvmlCallError as e:
        if e.code != ERROR_NOT_SUPPORTED:
            raise
        return default


def _read_gpu(nvml, index: int, lines: list[str]) -> None:
    handle = nvml.device_handle_by_index(index)
    lines.append(f"gpu {index} minor {nvml.device_minor_number(handle)}")
    major, minor_cc = nvml.device_cuda_compute_capability(handle)
    lines.append(f"gpu {index} compute-capability {major} {minor_cc}")
    architecture = _unless_not_supported(lambda: nvml.device_architecture(handle), None)
    lines.append(f"gpu {index} architecture {'not-supported' if architecture is None else architecture}")
    mig_mode = _unless_not_supported(lambda: nvml.device_mig_mode(handle)[0], None)
    lines.append(f"gpu {index} mig-mode {'not-supported' if mig_mode is None else mig_mode}")
    if mig_mode == DEVICE_MIG_ENABLE:
        _read_mig_devices(nvml, handle, index, lines)
    values = (("uuid", nvml.device_uuid(handle)), ("name", nvml.device_name(handle)),
              ("brand", nvml.device_brand(handle)), ("pci-bus-id", nvml.device_pci_info(handle).busId),
              ("memory", nvml.device_memory_info(handle).total))
    lines.extend(f"gpu {index} {what} {value}" for what, value in values)


def _gi_profiles(nvml, handle, gpu_index: int = 0, lines: list[str] | None = None) -> dict[int, tuple[str, int]]:
    """GPU instance profile id -> (name such as "3g.20gb", compute slices); their lines into lines."""
    from cdi.nvml_binding import GPU_INSTANCE_PROFILE_COUNT, NvmlCallError

    lines = [] if lines is None else lines
    profiles = {}
    for index in range(GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = nvml.device_gpu_instance_profile_info(handle, index)
        except NvmlCallError:
            lines.append(f"gpu {gpu_index} gi-profile {index} none")
            continue  # not a profile of this GPU
        lines.append(f"gpu {gpu_index} gi-profile {index} id {info.id} slices {info.sliceCount} "
                     f"memory {info.memorySizeMB} name {info.name}")
        profiles[info.id] = _profile(info.name, info.sliceCount, info.memorySizeMB)
    return profiles


def _read_mig_devices(nvml, handle, gpu_index: int, lines: list[str]) -> None:
    from cdi.nvml_binding import COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, ERROR_NOT_FOUND, NvmlCallError

    _gi_profiles(nvml, handle, gpu_index, lines)
    count = nvml.device_max_mig_device_count(handle)
    lines.append(f"gpu {gpu_index} max-mig-devices {count}")
    for slot in range(count):
        try:
            mig = nvml.device_mig_device_handle_by_index(handle, slot)
        except NvmlCallError as e:
            if e.code != ERROR_NOT_FOUND:
                raise
            lines.append(f"gpu {gpu_index} mig {slot} none")
            continue  # an empty slot
        gi = nvml.device_gpu_instance_id(mig)
        ci = nvml.device_compute_instance_id(mig)
        gpu_instance = nvml.device_gpu_instance_by_id(handle, gi)
        gi_info = nvml.gpu_instance_info(gpu_instance)
        ci_info = nvml.compute_instance_info(nvml.gpu_instance_compute_instance_by_id(gpu_instance, ci))
        ci_slices = nvml.gpu_instance_compute_instance_profile_info(
            gpu_instance, ci_info.profileId, COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED).sliceCount
        lines.append(f"gpu {gpu_index} mig {slot} gi {gi} ci {ci} gi-profile-id {gi_info.profileId} "
                     f"ci-profile-id {ci_info.profileId} ci-slices {ci_slices} "
                     f"memory {nvml.device_memory_info(mig).total} uuid {nvml.device_uuid(mig)}")

"""The GPUs and MIG devices of a host, read through NVML (cdi.nvml_binding) from a driver root.

For a driver root other than "/", the root's own libnvidia-ml.so.1 is loaded by absolute path
(resolved inside the root); for "/", the loader finds it by soname. NVML can be loaded and
initialised once per process, so one process serves one driver root; asking for a second one is an
error. The library file is checked before it is loaded (a regular file, a whole ELF shared object),
and reading NVML runs under a watchdog (load_inventory): a FIFO, a truncated file or a driver that
never answers is one error line, not a hung or SIGBUS-killed program.

Importing this module is cheap (the binding is imported on first use): the runtime shim may use it
on a container's start path.
"""
from __future__ import annotations

import _thread
import os

from cdi.driver_root import DriverRoot, DriverRootError
from cdi.errors import CdiError
from cdi.inventory import Gpu, Inventory, MigDevice

NVML_SONAME = "libnvidia-ml.so.1"
# The C program that prints load_inventory's transcript (libcontainer_c/nvml_inventory.c), installed
# beside the launchers: the static launcher, which cannot dlopen, runs it instead of Python.
NVML_INVENTORY_PROGRAM = "gct-nvml-inventory"
NVML_TIMEOUT_ENV = "NVIDIA_CTK_NVML_TIMEOUT"
DEFAULT_NVML_TIMEOUT = 60.0
MAX_NVML_TIMEOUT = 3600.0
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
    """Host path of the root's libnvidia-ml.so.1, resolved inside the root; None if it has none."""
    for directory in LIBRARY_DIRS:
        resolved = root.resolve(f"{directory}/{NVML_SONAME}")
        if resolved is not None:
            return root.host_path(resolved)
    return None


class _NvmlState:
    lock = _thread.allocate_lock()   # the builtin lock: `import threading` costs ~5 ms on a hook's start
    root: str | None = None          # the driver root NVML was loaded from in this process
    library = None                   # its cdi.nvml_binding.NvmlLibrary, initialised
    loaded: str | None = None        # what was dlopen'd: the soname (root "/") or the library's host path


def _initialise(root: DriverRoot):
    """Load and initialise NVML for `root` once per process; returns the NvmlLibrary."""
    with _NvmlState.lock:
        if _NvmlState.root is not None:
            if _NvmlState.root != root.path:
                raise NvmlError(f"NVML is already loaded from driver root {_NvmlState.root} in this process",
                                root.path)
            return _NvmlState.library
        from cdi.nvml_binding import NvmlCallError, load_library

        try:
            path = find_nvml_library(root)
        except DriverRootError as e:
            raise NvmlError(e.what, e.where) from None
        if path is not None:
            check_library(path)
        if root.path == "/":
            # the loader's search, as NVIDIA's tools do; the file the usual directories hold, which is
            # what it finds with every distribution's driver packages, was checked above
            path = NVML_SONAME
            try:
                library = load_library(NVML_SONAME)
            except NvmlCallError:
                raise NvmlError(f"no NVIDIA driver: {NVML_SONAME} is not installed",
                                f"driver root {root.path}") from None
        else:
            if path is None:
                raise NvmlError(f"no NVIDIA driver: {NVML_SONAME} not found in the driver root", root.path)
            try:
                library = load_library(path)
            except NvmlCallError as e:
                raise NvmlError(f"cannot load the NVML library: {e}", path) from None
        try:
            library.init()
        except NvmlCallError as e:
            raise NvmlError(f"NVML initialisation failed: {e}", f"driver root {root.path}") from None
        _NvmlState.root, _NvmlState.library, _NvmlState.loaded = root.path, library, path
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


def load_inventory(driver_root: DriverRoot | str | None = None, transcript: list[str] | None = None) -> Inventory:
    """Driver and CUDA versions, every visible GPU and its MIG devices, as this process sees them.

    The library file is checked before it is loaded (check_library), and loading and reading NVML run
    under a watchdog (NVIDIA_CTK_NVML_TIMEOUT seconds, default 60): a driver whose nvmlInit or any other
    call never returns (a wedged GPU, a library that hangs) ends the program with one error line
    instead of hanging it and the container's start for good.

    transcript: when a list, every answer the inventory is made of is appended to it, one line each
    (_Transcript): the same lines `gct-nvml-inventory` prints from the same calls, so that the
    launcher can tell, without Python, that the driver still answers what an earlier inventory was
    made of (runtime_shim.create_cache, jit-cdi mode)."""
    root = driver_root if isinstance(driver_root, DriverRoot) else DriverRoot(driver_root or "/")
    with _Watchdog(nvml_timeout(), f"driver root {root.path}"):
        return _read_inventory(root, _Transcript(transcript))


def loaded_library(root: DriverRoot) -> str | None:
    """What this process dlopen'd for root (the soname for "/", where the loader searches; else the
    library's host path), as `gct-nvml-inventory` takes it; None when NVML was not loaded for root."""
    return _NvmlState.loaded if _NvmlState.root == root.path else None


class _Transcript:
    """The lines of a transcript (load_inventory), or nothing when none is asked for.

    A line names an answer and gives it: numbers in decimal, a text last on its line as the library
    wrote it (so one that holds a newline makes a transcript no launcher can match). What is read:
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

    def __init__(self, lines: list[str] | None):
        self.lines = lines

    def __bool__(self) -> bool:
        return self.lines is not None

    def add(self, line: str) -> None:
        if self.lines is not None:
            self.lines.append(line)


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
    finished in `seconds`. A thread, because a call into the library that never returns cannot be
    interrupted: a signal handler written in Python runs only once the call returns, and a child
    process to read NVML in costs ~3 ms of every GPU container's start (docs/runtime-shim.md#speed)
    where this costs ~0.1 ms. The thread waits on a lock; whoever takes `claim` first, the block
    finishing or the watchdog firing, decides."""

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


def _read_inventory(root: DriverRoot, transcript: _Transcript) -> Inventory:
    nvml = _initialise(root)
    from cdi.nvml_binding import NvmlCallError

    where = "NVML"
    try:
        driver_version = nvml.system_driver_version()
        cuda_driver_version = nvml.system_cuda_driver_version()
        transcript.add(f"driver-version {driver_version}")
        transcript.add(f"cuda-driver-version {cuda_driver_version}")
        minors_file = _read_mig_minors_file(root.proc_path(MIG_MINORS))
        if transcript:
            import zlib   # built in: ~0.1 ms

            transcript.add("mig-minors absent" if minors_file is None
                           else f"mig-minors {zlib.crc32(minors_file)} {len(minors_file)}")
        cap_minors = _parse_mig_minors(minors_file)
        count = nvml.device_count()
        transcript.add(f"device-count {count}")
        gpus = []
        for index in range(count):
            where = f"GPU {index}"
            gpus.append(_read_gpu(nvml, index, cap_minors, transcript))
    except NvmlCallError as e:
        raise NvmlError(f"NVML query failed: {e}", where) from None
    return Inventory(driver_version=driver_version, cuda_version=_cuda_version(cuda_driver_version), gpus=tuple(gpus))


def _unless_not_supported(read, default):
    """read(), or `default` where the GPU does not support the query (NVML_ERROR_NOT_SUPPORTED)."""
    from cdi.nvml_binding import ERROR_NOT_SUPPORTED, NvmlCallError

    try:
        return read()
    except NvmlCallError as e:
        if e.code != ERROR_NOT_SUPPORTED:
            raise
        return default


def _read_gpu(nvml, index: int, cap_minors, transcript: _Transcript) -> Gpu:
    from cdi.nvml_binding import DEVICE_MIG_ENABLE

    handle = nvml.device_handle_by_index(index)
    minor = nvml.device_minor_number(handle)
    transcript.add(f"gpu {index} minor {minor}")
    major, minor_cc = nvml.device_cuda_compute_capability(handle)
    transcript.add(f"gpu {index} compute-capability {major} {minor_cc}")
    architecture = _unless_not_supported(lambda: nvml.device_architecture(handle), None)
    transcript.add(f"gpu {index} architecture {'not-supported' if architecture is None else architecture}")
    mig_mode = _unless_not_supported(lambda: nvml.device_mig_mode(handle)[0], None)
    transcript.add(f"gpu {index} mig-mode {'not-supported' if mig_mode is None else mig_mode}")
    mig_enabled = mig_mode == DEVICE_MIG_ENABLE
    migs = _read_mig_devices(nvml, handle, index, minor, cap_minors, transcript) if mig_enabled else ()
    uuid, name, brand = nvml.device_uuid(handle), nvml.device_name(handle), nvml.device_brand(handle)
    pci_bus_id, memory = nvml.device_pci_info(handle).busId, nvml.device_memory_info(handle).total
    for what, value in (("uuid", uuid), ("name", name), ("brand", brand), ("pci-bus-id", pci_bus_id),
                        ("memory", memory)):
        transcript.add(f"gpu {index} {what} {value}")
    return Gpu(index=index, minor=minor, uuid=uuid, name=name, brand=BRANDS.get(brand, "Unknown"),
               pci_bus_id=pci_bus_id, architecture=ARCHITECTURES.get(architecture, "Unknown"),
               compute_capability=f"{major}.{minor_cc}", memory_total=memory,
               mig_enabled=mig_enabled, mig_devices=tuple(migs))


def _gi_profiles(nvml, handle, gpu_index: int = 0,
                 transcript: _Transcript = _Transcript(None)) -> dict[int, tuple[str, int]]:
    """GPU instance profile id -> (name such as "3g.20gb", compute slices)."""
    from cdi.nvml_binding import GPU_INSTANCE_PROFILE_COUNT, NvmlCallError

    profiles = {}
    for index in range(GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = nvml.device_gpu_instance_profile_info(handle, index)
        except NvmlCallError:
            transcript.add(f"gpu {gpu_index} gi-profile {index} none")
            continue  # not a profile of this GPU
        transcript.add(f"gpu {gpu_index} gi-profile {index} id {info.id} slices {info.sliceCount} "
                       f"memory {info.memorySizeMB} name {info.name}")
        name = info.name.removeprefix("MIG ")
        if not name:  # drivers without profile names: build it the way nvidia-smi shows it
            name = f"{info.sliceCount}g.{round(info.memorySizeMB / 1024)}gb"
        profiles[info.id] = (name, info.sliceCount)
    return profiles


def _read_mig_devices(nvml, handle, gpu_index: int, gpu_minor: int, cap_minors,
                      transcript: _Transcript) -> list[MigDevice]:
    from cdi.nvml_binding import COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, ERROR_NOT_FOUND, NvmlCallError

    profiles = _gi_profiles(nvml, handle, gpu_index, transcript)
    count = nvml.device_max_mig_device_count(handle)
    transcript.add(f"gpu {gpu_index} max-mig-devices {count}")
    devices = []
    for slot in range(count):
        try:
            mig = nvml.device_mig_device_handle_by_index(handle, slot)
        except NvmlCallError as e:
            if e.code != ERROR_NOT_FOUND:
                raise
            transcript.add(f"gpu {gpu_index} mig {slot} none")
            continue  # an empty slot
        gi = nvml.device_gpu_instance_id(mig)
        ci = nvml.device_compute_instance_id(mig)
        gpu_instance = nvml.device_gpu_instance_by_id(handle, gi)
        gi_info = nvml.gpu_instance_info(gpu_instance)
        gi_name, gi_slices = profiles.get(gi_info.profileId, (f"profile{gi_info.profileId}", 0))
        ci_info = nvml.compute_instance_info(nvml.gpu_instance_compute_instance_by_id(gpu_instance, ci))
        ci_slices = nvml.gpu_instance_compute_instance_profile_info(
            gpu_instance, ci_info.profileId, COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED).sliceCount
        uuid, memory = nvml.device_uuid(mig), nvml.device_memory_info(mig).total
        transcript.add(f"gpu {gpu_index} mig {slot} gi {gi} ci {ci} gi-profile-id {gi_info.profileId} "
                       f"ci-profile-id {ci_info.profileId} ci-slices {ci_slices} memory {memory} uuid {uuid}")
        profile = gi_name if ci_slices == gi_slices else f"{ci_slices}c.{gi_name}"
        # the real drivers' fixed layout when the driver has no mig-minors file to read
        gi_cap = cap_minors.get((gpu_minor, gi, None), 3 + 135 * gpu_minor + 9 * gi)
        ci_cap = cap_minors.get((gpu_minor, gi, ci), 3 + 135 * gpu_minor + 9 * gi + 1 + ci)
        devices.append(MigDevice(parent_index=gpu_index, index=slot, uuid=uuid, gi=gi, ci=ci, profile=profile,
                                 gi_cap_minor=gi_cap, ci_cap_minor=ci_cap, memory_total=memory))
    return devices

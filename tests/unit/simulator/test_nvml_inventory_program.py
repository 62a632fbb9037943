"""gct-nvml-inventory (nvml_inventory/nvml_inventory.c) against cdi/nvml.py: on simulated hosts its stdout
is, byte for byte, the transcript cdi.nvml records when it reads NVML in its own process (the launcher
applies cached edits only when the two are equal), and a broken library (an error, a hang while loading
or in a call, a crash, a truncated file) is exit 1 to 4 with one line on stderr and nothing on stdout,
within about its timeout, whatever the library does to its signals or leaves running. The program is built from the checkout for the module, as
install_launchers builds it, and run as the launcher runs it: no environment, stdin on /dev/null."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher import install_launchers
from tests.support.simulated_host import create_in_process

REPO = Path(__file__).resolve().parents[3]
LIB = "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
MIG_MINORS = "proc/driver/nvidia-caps/mig-minors"

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("gcc") is None,
                                reason="a simulated host needs root (mknod) and gcc")


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("nvml-inventory") / "gct-nvml-inventory"
    install_launchers.build_nvml_inventory(path)
    return path


def host(tmp_path_factory, name: str, gpus: int, mig: tuple[str, ...] = (), model: str | None = None) -> Path:
    from simulator.host_builder import create_simulated_host

    root = tmp_path_factory.mktemp(name) / "host"
    if model is None:
        create_in_process(root, gpus=gpus, mig_options=mig)
    else:
        create_simulated_host(str(root), gpus=gpus, model=model, driver_version="535.161.08", cuda_version="12.2",
                              mig_options=list(mig))
    return root


@pytest.fixture(scope="module")
def one_gpu(tmp_path_factory) -> Path:
    return host(tmp_path_factory, "one-gpu", 1)


@pytest.fixture(scope="module")
def a100_mig(tmp_path_factory) -> Path:
    """GPU 0 without MIG, GPU 1 with two 1g.5gb, GPU 2 with 3g.20gb, 2g.10gb and 1g.5gb; empty slots on both."""
    return host(tmp_path_factory, "a100-mig", 3, ("1=1g.5gb,1g.5gb", "2=3g.20gb,2g.10gb,1g.5gb"))


@pytest.fixture(scope="module")
def t4(tmp_path_factory) -> Path:
    """Another brand and architecture, and MIG mode NOT_SUPPORTED."""
    return host(tmp_path_factory, "t4", 2, model="Tesla T4")


@pytest.fixture(scope="module")
def h100(tmp_path_factory) -> Path:
    return host(tmp_path_factory, "h100", 2, ("0=4g.40gb,2g.20gb,1g.10gb+me",), model="NVIDIA H100 80GB HBM3")


def python_transcript(root: Path) -> tuple[str, str, str]:
    """(library argument, mig-minors path, the transcript as the program must print it), from
    cdi.nvml reading NVML in a process of its own (NVML is loaded once per process), not through
    the program (as where it is not installed)."""
    code = ("import sys\n"
            "from cdi.driver_root import DriverRoot\n"
            "import cdi.nvml\n"
            "from cdi.nvml import MIG_MINORS, load_inventory, loaded_library\n"
            "cdi.nvml.inventory_program = lambda bin_dir=None: None\n"
            "root = DriverRoot(sys.argv[1])\n"
            "lines = []\n"
            "load_inventory(root, lines)\n"
            "print(loaded_library(root)); print(root.proc_path(MIG_MINORS))\n"
            "sys.stdout.write(''.join(line + '\\n' for line in lines))\n")
    done = python_from_repo(code, root)
    assert done.returncode == 0, done.stderr
    library, mig_minors, transcript = done.stdout.split("\n", 2)
    return library, mig_minors, transcript


def python_from_repo(code: str, *args: object) -> subprocess.CompletedProcess:
    """A fresh interpreter running code with args, importing this checkout's modules (text output)."""
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)


def run(program: Path, *args: str, timeout: float = 30, preexec_fn=None) -> subprocess.CompletedProcess:
    return subprocess.run([str(program), *args], capture_output=True, env={}, stdin=subprocess.DEVNULL,
                          timeout=timeout, preexec_fn=preexec_fn)


def assert_same_as_python(program: Path, root: Path) -> str:
    library, mig_minors, expected = python_transcript(root)
    done = run(program, library, mig_minors, "10")
    assert (done.returncode, done.stderr) == (0, b""), done.stderr
    assert done.stdout.decode() == expected
    return expected


@pytest.mark.parametrize("name", ["one_gpu", "a100_mig", "t4", "h100"])
def test_the_program_prints_what_cdi_nvml_records(program, request, name):
    transcript = assert_same_as_python(program, request.getfixturevalue(name))
    # and the host is what the fixture says, not two readers agreeing on little
    assert transcript.startswith("driver-version ") and transcript.endswith("\n")
    if name == "a100_mig":
        assert "gpu 2 mig 2 gi " in transcript and "gpu 1 mig 2 none\n" in transcript
        assert re.search(r"gpu 1 gi-profile \d+ none\n", transcript)
        assert "gpu 2 gi-profile 2 id 9 slices 3 memory 19968 name MIG 3g.20gb\n" in transcript
    if name == "t4":
        assert "gpu 1 mig-mode not-supported\ngpu 1 uuid " in transcript and "gpu 0 brand 2\n" in transcript
    if name == "h100":
        assert "gpu 0 architecture 9\n" in transcript and "name MIG 1g.10gb+me\n" in transcript


@pytest.mark.parametrize("name", ["a100_mig", "t4", "h100"])
def test_the_inventory_read_through_the_program_is_the_hosts(request, name):
    """load_inventory as the programs read it (through the installed gct-nvml-inventory) and read in
    the process give the same Inventory, the one the simulator built the host from (its marker holds
    the identities, not memory, brand or architecture)."""
    root = request.getfixturevalue(name)
    code = ("import sys\n"
            "import cdi.nvml\n"
            "assert cdi.nvml.inventory_program() is not None\n"
            "through = cdi.nvml.load_inventory(sys.argv[1])\n"
            "cdi.nvml.inventory_program = lambda bin_dir=None: None\n"
            "print(through == cdi.nvml.load_inventory(sys.argv[1])); print(repr(through))\n")
    done = python_from_repo(code, root)
    assert done.returncode == 0, done.stderr
    same, through = done.stdout.split("\n", 1)
    assert same == "True"
    from cdi.inventory import Gpu, Inventory, MigDevice   # noqa: F401 (for eval)
    from tests.support.simulated_host import inventory_from_marker

    def identities(inventory):
        return (inventory.driver_version, inventory.cuda_version,
                [(g.index, g.minor, g.uuid, g.name, g.pci_bus_id, g.mig_enabled,
                  [(m.index, m.uuid, m.gi, m.ci, m.profile, m.gi_cap_minor, m.ci_cap_minor) for m in g.mig_devices])
                 for g in inventory.gpus])

    read = eval(through)
    assert identities(read) == identities(inventory_from_marker(root))
    assert all(g.memory_total > 0 and g.architecture != "Unknown" for g in read.gpus)


@pytest.mark.parametrize("lines", [
    ["driver-version 1", "cuda-driver-version 12040", "mig-minors absent", "device-count 1"],   # GPU 0 missing
    ["driver-version 1", "cuda-driver-version x", "device-count 0"],
    ["driver-version 1", "cuda-driver-version 12040", "device-count 0", "a second line of a text"],
    ["driver-version 1", "cuda-driver-version 12040", "device-count 1", "gpu 0 minor"],
])
def test_a_transcript_that_cannot_be_read_is_an_error(lines):
    from cdi.nvml import NvmlError, inventory_from_transcript

    with pytest.raises(NvmlError) as error:
        inventory_from_transcript(lines, {}, "gct-nvml-inventory")
    assert error.value.what.startswith("an NVML answer that cannot be read: ")
    assert error.value.where == "gct-nvml-inventory"


def test_a_missing_mig_minors_file_is_a_line_of_its_own(program, a100_mig, tmp_path):
    root = tmp_path / "host"
    subprocess.run(["cp", "-a", str(a100_mig), str(root)], check=True)
    (root / MIG_MINORS).unlink()
    assert "\nmig-minors absent\n" in assert_same_as_python(program, root)


def test_a_changed_mig_minors_file_changes_its_line(program, a100_mig, tmp_path):
    """The crc32 and the size are of the file's bytes: one byte more, another line (and still Python's)."""
    root = tmp_path / "host"
    subprocess.run(["cp", "-a", str(a100_mig), str(root)], check=True)
    before = assert_same_as_python(program, root)
    with open(root / MIG_MINORS, "ab") as f:
        f.write(b"\n")
    after = assert_same_as_python(program, root)
    assert [line for line in before.splitlines() if line.startswith("mig-minors ")] != \
        [line for line in after.splitlines() if line.startswith("mig-minors ")]


@pytest.fixture(scope="module")
def without_v_calls(tmp_path_factory) -> Path:
    """A driver from before the ...ProfileInfoV calls (R470): the simulator's library built with those
    two functions under other names, so the library lacks their symbols and both readers take the v1 calls."""
    wrapper = tmp_path_factory.mktemp("cc") / "cc-without-v-calls"
    wrapper.write_text(f"#!/bin/sh\nexec {shutil.which('gcc')} "
                       "-DnvmlDeviceGetGpuInstanceProfileInfoV=simDeviceGetGpuInstanceProfileInfoHidden "
                       "-DnvmlGpuInstanceGetComputeInstanceProfileInfoV=simGpuInstanceGetComputeInstanceProfileInfoHidden "
                       '"$@"\n')
    wrapper.chmod(0o755)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CC", str(wrapper))   # simulator.native_build.compiler() takes $CC first
        root = host(tmp_path_factory, "without-v", 2, ("1=3g.20gb,1g.5gb",))
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(root / LIB)], capture_output=True, text=True,
                             check=True).stdout
    assert " nvmlDeviceGetGpuInstanceProfileInfo\n" in symbols and "ProfileInfoV" not in symbols
    return root


def test_a_driver_without_the_versioned_profile_calls_is_read_through_v1(program, without_v_calls):
    transcript = assert_same_as_python(program, without_v_calls)
    # the v1 structs have no name; the compute-instance slices came through the v1 call too
    assert "gpu 1 gi-profile 2 id 9 slices 3 memory 19968 name \n" in transcript
    assert " gi-profile-id 9 ci-profile-id 2 ci-slices 3 " in transcript


# --- failures: exit 1 to 4, one line on stderr, nothing on stdout -----------------------------------------

def one_error_line(done: subprocess.CompletedProcess, status: int = 1) -> str:
    assert done.returncode == status, (done.returncode, done.stderr)
    assert done.stdout == b""
    line, = done.stderr.decode().splitlines()
    assert line.startswith("gct-nvml-inventory: error: ") and done.stderr.endswith(b"\n"), line
    return line


def a_library(tmp_path: Path, source: str) -> Path:
    c = tmp_path / "nvml.c"
    c.write_text(source)
    library = tmp_path / "libnvidia-ml.so.1"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library), str(c)], check=True)
    return library


def test_a_missing_library(program, tmp_path):
    line = one_error_line(run(program, str(tmp_path / "libnvidia-ml.so.1"), str(tmp_path / "mig-minors"), "5"))
    assert line.endswith(f"No such file or directory ({tmp_path}/libnvidia-ml.so.1)"), line
    line = one_error_line(run(program, "libnvidia-ml-not-installed.so.1", str(tmp_path / "mig-minors"), "5"), 4)
    assert "cannot load the NVML library: libnvidia-ml-not-installed.so.1: cannot open shared object file" in line


def test_a_library_missing_a_symbol(program, tmp_path):
    library = a_library(tmp_path, "int nvmlInit_v2(void) { return 0; }\n")
    line = one_error_line(run(program, str(library), str(tmp_path / "mig-minors"), "5"))
    assert line == ("gct-nvml-inventory: error: NVML query failed: nvmlSystemGetDriverVersion: Function Not Found "
                    "(NVML)")


def test_the_library_is_bound_at_load_as_cffi_binds_it(program, tmp_path):
    """RTLD_NOW, as cffi's dlopen: a reference nothing resolves fails the load (RTLD_LAZY would not)."""
    library = a_library(tmp_path, "extern int gct_nowhere(void);\nint nvmlInit_v2(void) { return 0; }\n"
                                  "int nvmlUnused(void) { return gct_nowhere(); }\n")
    line = one_error_line(run(program, str(library), str(tmp_path / "mig-minors"), "5"), 4)
    assert line.startswith("gct-nvml-inventory: error: cannot load the NVML library: ") and \
        "undefined symbol: gct_nowhere" in line, line


def test_an_error_past_the_first_lines_still_prints_nothing(program, one_gpu, tmp_path):
    """The transcript is written at the end: a GPU whose handle cannot be had fails after several lines."""
    library = a_library(tmp_path, """
        #include <string.h>
        int nvmlInit_v2(void) { return 0; }
        const char *nvmlErrorString(int code) { return code == 2 ? "Invalid Argument\\nsecond line" : "?"; }
        int nvmlSystemGetDriverVersion(char *v, unsigned n) { strncpy(v, "550.54.15", n); return 0; }
        int nvmlSystemGetCudaDriverVersion(int *v) { *v = 12040; return 0; }
        int nvmlDeviceGetCount_v2(unsigned *n) { *n = 1; return 0; }
        int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **h) { (void)i; (void)h; return 2; }
        """)
    line = one_error_line(run(program, str(library), str(one_gpu / MIG_MINORS), "5"))
    assert line == "gct-nvml-inventory: error: NVML query failed: Invalid Argument?second line (GPU 0)"


def block_and_ignore_signals():
    """What a careless parent may leave behind, surviving exec: SIGALRM and SIGCHLD ignored and blocked
    (an ignored SIGCHLD would have the kernel reap the program's child before it is waited for)."""
    for signo in (signal.SIGALRM, signal.SIGCHLD):
        signal.signal(signo, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM, signal.SIGCHLD})


HANGS = ("the driver or its library hangs; check the driver, or allow longer with NVIDIA_CTK_NVML_TIMEOUT")


@pytest.mark.parametrize("preexec_fn", [None, block_and_ignore_signals], ids=["plain", "signals-blocked-ignored"])
def test_a_library_whose_init_hangs_ends_at_the_timeout(program, tmp_path, preexec_fn):
    library = a_library(tmp_path, "#include <unistd.h>\nint nvmlInit_v2(void) { for (;;) pause(); }\n")
    started = time.monotonic()
    done = run(program, str(library), str(tmp_path / "mig-minors"), "0.5", timeout=10, preexec_fn=preexec_fn)
    took = time.monotonic() - started
    assert one_error_line(done, 2) == f"gct-nvml-inventory: error: NVML did not answer in 0.5 s in nvmlInit_v2: {HANGS} ({library})"
    assert 0.5 <= took < 3, took


# A library whose loading never ends (a constructor that waits for ever), in three ways: simply; with
# every signal blocked and its own SIGALRM handler (nothing delivered to the process ends it); and
# leaving a process of its own behind that would hold the caller's pipe open.
CONSTRUCTORS = {
    "pause": "for (;;) pause();",
    "signals-blocked": "sigset_t all; sigfillset(&all); sigprocmask(SIG_BLOCK, &all, 0); signal(SIGALRM, SIG_IGN);"
                       " for (;;) pause();",
    "forks": "if (fork() == 0) for (;;) pause(); for (;;) pause();",
}


@pytest.mark.parametrize("how", list(CONSTRUCTORS))
def test_a_library_whose_loading_hangs_ends_at_the_timeout(program, tmp_path, how):
    library = a_library(tmp_path, "#include <signal.h>\n#include <unistd.h>\n"
                                  f"__attribute__((constructor)) static void stuck(void) {{ {CONSTRUCTORS[how]} }}\n"
                                  "int nvmlInit_v2(void) { return 0; }\n")
    started = time.monotonic()
    # capture_output: the run ends only when nothing holds its pipes open any more
    done = run(program, str(library), str(tmp_path / "mig-minors"), "0.5", timeout=10)
    took = time.monotonic() - started
    assert one_error_line(done, 2) == (f"gct-nvml-inventory: error: NVML did not answer in 0.5 s while loading the "
                                       f"library (dlopen: its constructors): {HANGS} ({library})")
    assert 0.5 <= took < 3, took


def test_the_timeout_is_said_as_given_without_trailing_zeros(program, tmp_path):
    library = a_library(tmp_path, "#include <unistd.h>\nint nvmlInit_v2(void) { for (;;) pause(); }\n")
    done = run(program, str(library), str(tmp_path / "mig-minors"), "0.250000", timeout=10)
    assert " did not answer in 0.25 s in nvmlInit_v2: " in one_error_line(done, 2)


def crashes_in(program, tmp_path, source: str) -> str:
    """The line of a run whose library crashes: exit 3, never the signal itself."""
    library = a_library(tmp_path, source)
    line = one_error_line(run(program, str(library), str(tmp_path / "mig-minors"), "5"), 3)
    assert line.endswith(f" ({library})"), line
    return line.removeprefix("gct-nvml-inventory: error: ").removesuffix(f" ({library})")


def test_a_library_that_crashes_is_one_line_saying_where(program, one_gpu, tmp_path):
    assert crashes_in(program, tmp_path, "int nvmlInit_v2(void) { return *(volatile int *)0; }\n") == \
        "the NVML library crashed (SIGSEGV) in nvmlInit_v2"
    assert crashes_in(program, tmp_path, "#include <stdlib.h>\n"
                      "__attribute__((constructor)) static void c(void) { abort(); }\n") == \
        "the NVML library crashed (SIGABRT) while loading the library (dlopen: its constructors)"
    assert crashes_in(program, tmp_path, """
        #include <string.h>
        int nvmlInit_v2(void) { return 0; }
        int nvmlSystemGetDriverVersion(char *v, unsigned n) { strncpy(v, "550.54.15", n); return 0; }
        int nvmlSystemGetCudaDriverVersion(int *v) { *v = 12040; return 0; }
        int nvmlDeviceGetCount_v2(unsigned *n) { *n = 1; return 0; }
        int nvmlDeviceGetHandleByIndex_v2(unsigned i, void **h) { (void)i; (void)h; return *(volatile int *)0; }
        """) == "the NVML library crashed (SIGSEGV) while reading NVML (GPU 0)"


def test_a_library_that_ends_the_process_itself_is_no_transcript(program, tmp_path):
    """exit(0) from the library midway: status 0 of its process, yet no transcript; said so."""
    line = crashes_in(program, tmp_path, "#include <stdlib.h>\nint nvmlInit_v2(void) { exit(0); }\n")
    assert line == "the NVML library ended the process (exit status 0) in nvmlInit_v2"


SIGBUS_LINE = ("the NVML library crashed (SIGBUS: the library file is shorter than its mapping, truncated or "
               "replaced while in use) while loading the library (dlopen: its constructors)")


def test_a_truncated_library_is_one_line_not_a_sigbus(program, one_gpu, tmp_path):
    """A library file cut short: the loader maps pages past its end and touches them."""
    data = (one_gpu / LIB).resolve().read_bytes()
    library = tmp_path / "libnvidia-ml.so.1"
    library.write_bytes(data[:len(data) // 2])
    line = one_error_line(run(program, str(library), str(tmp_path / "mig-minors"), "5"), 3)
    assert line == f"gct-nvml-inventory: error: {SIGBUS_LINE} ({library})"


def test_a_library_truncated_after_it_was_mapped_is_one_line_not_a_sigbus(program, tmp_path):
    """The file cut short while loaded (an upgrade writing over it in place): its next page read is a SIGBUS."""
    library = tmp_path / "libnvidia-ml.so.1"
    source = f"""
        #include <unistd.h>
        static const char pages[1 << 16] = {{1}};
        int nvmlInit_v2(void) {{ truncate("{library}", 0); return pages[(1 << 16) - 1]; }}
        """
    line = crashes_in(program, tmp_path, source)
    assert line == "the NVML library crashed (SIGBUS: the library file is shorter than its mapping, truncated or " \
                   "replaced while in use) in nvmlInit_v2"


def test_a_mig_minors_file_that_cannot_be_read(program, one_gpu, tmp_path):
    library, _, _ = python_transcript(one_gpu)
    line = one_error_line(run(program, library, str(tmp_path), "5"))   # a directory
    assert line == f"gct-nvml-inventory: error: cannot read MIG capability minors: Is a directory ({tmp_path})"


@pytest.mark.parametrize("args, where", [
    *(((), "command line"), (("a", "b"), "command line"), (("a", "b", "1", "d"), "command line")),
    *((("", "/m", "1"), "LIBRARY"), (("lib/libnvidia-ml.so.1", "/m", "1"), "LIBRARY")),
    *((("libnvidia-ml.so.1", "/m", t), "TIMEOUT_SECONDS")
      for t in ("0", "0.0", "-1", "x", "inf", "nan", "1e3", " 1", "1 ", ".5", "1.", "3600.5", "3601",
                "99999999999999999999", "0x10", "0.0000001", "")),
])
def test_bad_arguments_are_one_line_before_anything_is_loaded(program, args, where):
    assert one_error_line(run(program, *args)).endswith(f" ({where})")


def test_the_program_and_python_agree_on_the_constants():
    """The #defines nvml_inventory.c names after cdi.nvml_binding's and cdi.nvml's values hold those values."""
    from cdi import nvml, nvml_binding

    source = install_launchers.NVML_INVENTORY_SOURCE.read_text()
    defines = dict(re.findall(r"(?m)^#define ([A-Z][A-Z0-9_]*) (\(1 << \d+\)|0x[0-9a-f]+|\d+)$", source))
    assert len(defines) == 13, defines
    for name, text in defines.items():
        shift = re.fullmatch(r"\(1 << (\d+)\)", text)
        value = 1 << int(shift[1]) if shift else int(text, 0)
        expected = getattr(nvml_binding, name) if hasattr(nvml_binding, name) else getattr(nvml, name)
        assert value == expected, name


def test_the_library_sees_no_descriptor_the_caller_left_open(program, tmp_path):
    """The launcher runs it from a runtime call whose descriptors above stdio are the container's
    (handed to runc): closed before the driver library is loaded. The library here fails its init
    when one is open (fd 3 up to 63)."""
    library = a_library(tmp_path, """
        #include <fcntl.h>
        int nvmlInit_v2(void) {
            for (int fd = 3; fd < 64; fd++)
                if (fcntl(fd, F_GETFD) != -1) return 999;
            return 0;
        }
        """)
    read_end, write_end = os.pipe()
    try:
        done = subprocess.run([str(program), str(library), str(tmp_path / "mig-minors"), "5"], capture_output=True,
                              env={}, stdin=subprocess.DEVNULL, timeout=30, pass_fds=(read_end, write_end))
    finally:
        os.close(read_end)
        os.close(write_end)
    # past the init: the next call is the one the library lacks
    assert one_error_line(done) == ("gct-nvml-inventory: error: NVML query failed: nvmlSystemGetDriverVersion: "
                                    "Function Not Found (NVML)")


def _gone(pids: list[int], within: float) -> bool:
    """Whether every pid has ended (or is a zombie no one reaps) within the given seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except FileNotFoundError:
                continue
            if state != "Z":
                alive.append(pid)
        if not alive:
            return True
        time.sleep(0.05)
    return False


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(p) for p in (task / "children").read_text().split()]
    return found


def test_a_sigterm_ends_the_run_and_the_librarys_child_at_once(program, tmp_path):
    """A caller that stops (the device plugin's SIGTERM while a driver that hangs is read) ends the run at
    once with one line, and the child stuck in the library with it, not at the deadline."""
    library = a_library(tmp_path, "#include <unistd.h>\nint nvmlInit_v2(void) { for (;;) pause(); }\n")
    process = subprocess.Popen([str(program), str(library), str(tmp_path / "mig-minors"), "30"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={})
    time.sleep(0.5)
    child, = _children(process.pid)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=5)
    assert process.returncode == 1 and out == b""
    assert err.decode() == (f"gct-nvml-inventory: error: stopped by SIGTERM in nvmlInit_v2 (its caller ended or "
                            f"asked it to stop) ({library})\n")
    assert _gone([child], 3)


def test_the_callers_end_ends_the_run_and_the_librarys_child(program, tmp_path):
    """The caller killed outright (SIGKILL: no chance to stop its reader): the run and the library's child
    end within moments, not at the 30 s deadline, and nothing of them is left behind."""
    library = a_library(tmp_path, "#include <unistd.h>\nint nvmlInit_v2(void) { for (;;) pause(); }\n")
    caller = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time\n"
         f"p = subprocess.Popen([{str(program)!r}, {str(library)!r}, {str(tmp_path / 'mig-minors')!r}, '30'],"
         " stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={})\n"
         "print(p.pid, flush=True)\ntime.sleep(60)\n"], stdout=subprocess.PIPE, text=True)
    run_pid = int(caller.stdout.readline())
    time.sleep(0.5)
    child, = _children(run_pid)
    caller.kill()
    caller.wait()
    assert _gone([run_pid, child], 3)

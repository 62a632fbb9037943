"""nvidia-container-runtime: the OCI runtime shim in front of runc/crun.

Engines call it exactly like runc. For `create` and `run` with a GPU request it edits the bundle's
config.json (in the mode the config or the program name picks, runtime_shim.modes) and then execs the
low-level runtime with the same argv; for everything else it execs the runtime at once (normally the
C launcher already did that without starting Python: launcher/runtime_passthrough.c).

Started through the static launcher, this process has a reduced environment; the caller's own one
(which the low-level runtime must get) arrives in a memfd named by GCT_LAUNCHER_ENVIRON_FD.
"""
from __future__ import annotations

import gc

gc.disable()  # a short-lived process that ends in exec: the cyclic collector only costs time (~10%)

import os  # noqa: E402  (after gc.disable: the imports below are most of the start-up)
import sys  # noqa: E402

from cdi import errors  # noqa: E402
from cdi.errors import CdiError, message_line  # noqa: E402
from runtime_shim import runtime_cache  # noqa: E402
from runtime_shim.errors import ShimError, append_line, runc_log_line  # noqa: E402
from runtime_shim.runc_argv import RuncCommand, parse_runc_argv  # noqa: E402
from runtime_shim.shim_log import log, warning_stream  # noqa: E402

ENVIRON_FD = "GCT_LAUNCHER_ENVIRON_FD"
LAUNCHER_EXE = "GCT_LAUNCHER_EXE"
# Put into the low-level runtime's environment (its path) by both exec paths, this one and the launcher's
# (runtime_passthrough.c), and refused when the shim finds it in its caller's: a `runtimes` entry that
# leads back to the shim (a wrapper script exec'ing it) would exec it again for ever. The hooks runc
# starts may inherit it from runc: they are other programs and never look.
STARTED_BY_SHIM = "GCT_RUNTIME_STARTED_BY_SHIM"


def caller_environment() -> dict[str, str]:
    """The environment the caller gave us: from the launcher's memfd, else our own (run directly)."""
    fd_text = os.environ.get(ENVIRON_FD)
    if fd_text is None:
        return {k: v for k, v in os.environ.items() if k not in (ENVIRON_FD, LAUNCHER_EXE)}
    fd = int(fd_text)
    chunks = []
    try:
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(fd)
    environ: dict[str, str] = {}
    for entry in b"".join(chunks).split(b"\0"):
        key, sep, value = entry.partition(b"=")
        if sep and key:  # the first of duplicates is the one getenv() finds
            environ.setdefault(os.fsdecode(key), os.fsdecode(value))
    return environ


def setup_logging(program: str, config, command: RuncCommand) -> None:
    """The debug log of the config (`nvidia-container-runtime.debug`, at `log-level`), and warnings
    also in runc's --log file, where engines look for them."""
    settings = config.nvidia_container_runtime
    log.configure(program, settings.log_level, settings.debug, command.log_file, command.log_format)


def modify_bundle(program: str, command: RuncCommand, config, environ: dict[str, str],
                  launcher_exe: str | None, identity: str | None) -> bytes | None:
    """Edit the bundle's config.json for the container's GPU request; untouched when there is none.
    Returns the bytes it replaced (None: not changed)."""
    from cdi.request import resolve_device_request
    from runtime_shim import create_cache, modes
    from runtime_shim.bundle_spec import read_spec, write_spec

    bundle = command.bundle_dir()
    oci, original = read_spec(bundle)
    # the request is read from its own members only: what the create cache's key holds (create_cache)
    view = create_cache.request_view(oci, config)
    request = resolve_device_request(view, config)
    if not request.is_gpu_container:
        log.debug("no GPU requested by %s: config.json left as it is", command.container_id)
        return None
    registry = None
    spec_checks = None

    def open_registry():
        nonlocal registry, spec_checks
        if registry is None:
            from cdi.registry import cache_path_in, open_registry as open_spec_dirs

            spec_checks = create_cache.checked(spec_paths(config))   # before reading: a change meanwhile is seen
            # NVIDIA_CTK_CDI_CACHE_FILE, else in the cache dir (None: a relative one, no cache: memory only)
            registry = open_spec_dirs(config, cache_path_in(environ, runtime_cache.cache_dir(environ)))
            for problem in registry.problems:
                log.warning("CDI spec skipped: %s", problem)
            for conflict in registry.conflicts:
                log.warning("CDI device skipped: %s", conflict)
        return registry

    mode = modes.choose_mode(modes.forced_mode(program) or config.nvidia_container_runtime.mode,
                             request, config, open_registry)
    log.info("container %s asks for %s (%s): mode %s", command.container_id,
             ",".join(request.devices) or "none", request.where, mode)
    edits = checks = None
    if mode == "cdi":
        edits = modes.cdi_edits(request, config, open_registry())
        nodes = create_cache.checked(n.host_path or n.path for n in edits.device_nodes)
        checks = spec_checks + nodes if spec_checks is not None and nodes is not None else None
        new = modes.drop_legacy_hooks(modes.apply_edits(oci, edits))
    elif mode == "jit-cdi":
        from runtime_shim.jit_cdi import JitRecording, jit_edits

        recording = JitRecording() if launcher_exe else None
        edits = jit_edits(request, config, environ, launcher_exe, recording)
        new = modes.drop_legacy_hooks(modes.apply_edits(oci, edits))
        if recording is not None:
            checks = create_cache.jit_checks(recording, edits, launcher_exe)
    elif mode == "legacy":
        hook_path = modes.find_hook(config, environ, launcher_exe)
        checks = create_cache.checked([hook_path])
        new = modes.apply_legacy(oci, hook_path, environ)
        edits = {"hooks": {"prestart": [modes.legacy_hook_entry(hook_path, environ)]}}
    else:
        from cdi.config import MODES, UNSUPPORTED_MODES

        supported = ", ".join(m for m in MODES if m not in UNSUPPORTED_MODES)
        raise ShimError(f"mode {mode!r} is not supported by this runtime; set one of {supported}",
                        "nvidia-container-runtime.mode")
    if new != oci:
        write_spec(bundle, new)
    if checks is not None and launcher_exe and not log.warned:
        record_create(program, config, environ, launcher_exe, identity, view, oci, mode, checks, edits)
    return original if new != oci else None


def spec_paths(config) -> list[str]:
    """The spec dirs and every spec file in them, as the registry lists them (what a cdi-mode create
    cache entry depends on)."""
    from cdi.registry import SPEC_SUFFIXES

    paths = []
    for directory in config.cdi.spec_dirs:
        paths.append(directory)
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        paths += [os.path.join(directory, n) for n in names if n.endswith(SPEC_SUFFIXES)]
    return paths


def record_create(program: str, config, environ: dict[str, str], launcher_exe: str, identity: str | None,
                  view: dict, oci: dict, mode: str, checks, edits) -> None:
    """Write the create cache entry of this request (runtime_shim.create_cache), if what the edits came
    from (checks: create_cache.Checks) is still as it was before it was read. edits: the ContainerEdits of
    cdi and jit-cdi mode, legacy mode's hooks."""
    from runtime_shim import create_cache, modes

    if mode != "legacy":   # as they land on an empty spec: the lists the launcher inserts into
        edits = modes.apply_edits(create_cache.empty_spec(oci), edits)
    lines = create_cache.edit_lines(edits, mode)
    if lines is None or not checks.still_true():
        return
    lines.append("unless-nvidia-prestart" if mode == "legacy" else "drop-nvidia-prestart")
    key = create_cache.key_lines(view, oci, program, launcher_exe, environ)
    create_cache.write_entry(environ, runtime_cache.config_path_string(environ), identity, key, mode,
                             checks.lines(), lines)


def refuse_reentry(environ: dict[str, str]) -> None:
    """A shim started by the low-level runtime a shim ran (STARTED_BY_SHIM) is a loop: one error instead."""
    runtime = environ.get(STARTED_BY_SHIM)
    if runtime is not None:
        raise ShimError("started again by the low-level runtime it ran, a loop: a `runtimes` entry of "
                        "config.toml must not lead back to nvidia-container-runtime (name runc or crun, or a "
                        "wrapper that runs one of them)", runtime)


def run(program: str, args: list[str], environ: dict[str, str], launcher_exe: str | None) -> tuple[str, bytes | None]:
    """Everything before the exec: (the low-level runtime to exec, the config.json bytes the edits
    replaced, None when config.json was not changed)."""
    from cdi.config import load_config
    from runtime_shim.low_level import find_low_level_runtime

    command = parse_runc_argv(args)
    config_path = runtime_cache.config_path_string(environ)
    identity = runtime_cache.config_identity(config_path)
    # the parsed document of an unchanged config is kept between runs (cdi.config_cache): a create
    # then imports no TOML parser (~7 ms), and every check of cdi.config still runs
    config = load_config(config_path, environ, use_cache=True)
    setup_logging(program, config, command)
    refuse_reentry(environ)
    search_path = runtime_cache.search_path(environ)
    # resolved and checked before config.json is edited: one that cannot be started fails the create
    # with the bundle untouched
    runtime = find_low_level_runtime(config.nvidia_container_runtime.runtimes, search_path)
    debug_log = config.nvidia_container_runtime.debug
    written = runtime_cache.write_cache(environ, identity, runtime,
                                        debug_log if debug_log and debug_log != "/dev/null" else None,
                                        runtime_cache.request_markers(config), runtime_cache.key_rules(config))
    if written is not None:
        from runtime_shim.stale_caches import prune_stale   # only after a write, which is rare

        prune_stale(os.path.dirname(written), keep=written)
    log.debug("argv %s: command %s, low-level runtime %s", args, command.command, runtime)
    replaced = None
    if command.modify:
        replaced = modify_bundle(program, command, config, environ, launcher_exe, identity)
    elif command.error:
        log.debug("not modified, runc will refuse the command line: %s", command.error)
    return runtime, replaced


def roll_back(args: list[str], replaced: bytes) -> str:
    """config.json put back as it was before the edits (the runtime could not be exec'd); what happened,
    for the error line."""
    from runtime_shim.bundle_spec import write_spec_bytes

    try:
        write_spec_bytes(parse_runc_argv(args).bundle_dir(), replaced)
    except ShimError as exc:
        return f"config.json keeps the edits: {exc}"
    return "config.json is as it was"


def report(program: str, error: Exception, args: list[str]) -> None:
    """One line on stderr (the real one: sys.stderr is the log's, see main); the same in runc's --log
    file (in its format) so engines show it. Warnings held until then go to runc's log first."""
    message = message_line(program, "error", str(error))
    command = parse_runc_argv(args)
    if log.held is not None:
        log.runc_path, log.runc_format = command.log_file, command.log_format
        log.release()
    print(message, file=sys.__stderr__, flush=True)
    if command.log_file:
        append_line(command.log_file, runc_log_line(message, "error", command.log_format))


def main() -> int:
    program = os.path.basename(sys.argv[0]) or "nvidia-container-runtime"
    args = sys.argv[1:]
    launcher_exe = os.environ.get(LAUNCHER_EXE)
    # Warnings never reach stderr, which for a create is the container's own stdio under docker and
    # containerd: they go to the debug log and runc's log (runtime_shim.shim_log), held until the config
    # says where the debug log is.
    log.hold(program)
    sys.stderr = warning_stream()
    errors.fatal_reporter = lambda error: report(program, error, args)   # a hung driver: runc's --log too
    prints_version = parse_runc_argv(args).prints_version
    if prints_version:  # ours first, then the runtime's own (the launcher does the same)
        from cdi.version import version_line

        print(version_line(program) + "\n", flush=True)
    try:
        environ = caller_environment()
        runtime, replaced = run(program, args, environ, launcher_exe)
    except CdiError as exc:
        from runtime_shim.low_level import NoRuntimeError   # loaded already: run() looked for the runtime

        if prints_version and isinstance(exc, NoRuntimeError):
            # --version asked about this program, which answered: the missing runtime is a warning, exit 0
            print(message_line(program, "warning", str(exc)), file=sys.__stderr__, flush=True)
            return 0
        log.error("%s", exc)  # the debug log, once the config has named one
        report(program, exc, args)
        return 1
    except Exception as exc:  # an unforeseen failure still ends in one line, the details in the debug log
        log.exception_details()
        report(program, ShimError(f"unexpected {type(exc).__name__}: {exc}"), args)
        return 1
    try:
        # checked by find_low_level_runtime before config.json was edited; one removed or replaced in
        # between (an admin's upgrade of runc at that moment), or one the kernel refuses all the same
        # (ETXTBSY: open for writing), still fails here: then the edits are rolled back
        os.execve(runtime, [runtime, *args], {**environ, STARTED_BY_SHIM: runtime})
    except OSError as exc:
        done = f"; {roll_back(args, replaced)}" if replaced is not None else ""
        report(program, ShimError(f"cannot execute the low-level runtime: {exc.strerror}{done}; check it or name "
                                  "another in nvidia-container-runtime.runtimes", runtime), args)
    return 1


if __name__ == "__main__":
    sys.exit(main())

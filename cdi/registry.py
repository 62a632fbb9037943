"""The CDI spec directories: which qualified device names exist, and which file defines each.

Dirs come in rising priority (default /etc/cdi, then /var/run/cdi): a device in a later dir replaces
one of the same name in an earlier dir; the same name twice in one dir is a conflict, and the device
is dropped (reported, never guessed). Only `*.json` and `*.yaml` files are read. A file that is
unreadable or invalid is reported and skipped; the others still count.

Verdicts of the schema are cached by file identity (cdi.spec_cache), so that a container start neither
imports jsonschema nor, for YAML specs seen before, a YAML parser.
"""
from __future__ import annotations

import os

from cdi.errors import InvalidNameError, RequestError, SpecError
from cdi.qualified_name import parse_qualified_name
from cdi.record import Record, field
from cdi.spec import ContainerEdits, Device, Spec
from cdi.spec_cache import ValidatedSpecCache
from cdi.spec_file import is_yaml_path, parse_spec_text, read_spec_bytes
from cdi.validate import Problem

DEFAULT_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")
# Where the packages' nvidia-cdi-refresh writes the spec, as NVIDIA's does: the path errors suggest.
GENERATED_SPEC_PATH = "/var/run/cdi/nvidia.yaml"
SPEC_SUFFIXES = (".json", ".yaml")
# On tmpfs like /var/run/cdi itself: verdicts do not outlive the specs generated at boot.
DEFAULT_CACHE_PATH = "/var/run/nvidia-container-toolkit/cdi-validated.json"
CACHE_FILE_NAME = "cdi-validated.json"
# Lets tests (and unusual hosts) move the cache; set but empty (or relative) = keep verdicts in memory only.
CACHE_PATH_ENV = "NVIDIA_CTK_CDI_CACHE_FILE"


class RegisteredDevice(Record, frozen=True):  # a Record, not a dataclass: this is on the create path
    name: str            # qualified: vendor/class=name
    device: Device
    spec: Spec
    path: str            # the spec file
    priority: int        # index of its spec dir


class Registry(Record):
    spec_dirs: tuple[str, ...] = DEFAULT_SPEC_DIRS
    cache: ValidatedSpecCache | None = None
    devices: dict[str, RegisteredDevice] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)   # unreadable or invalid files
    conflicts: list[str] = field(default_factory=list)      # one line each
    # name -> (priority, the two files) of a device defined twice in one dir
    conflicting: dict[str, tuple[int, str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.spec_dirs = tuple(str(d) for d in self.spec_dirs)
        if self.cache is None:
            self.cache = ValidatedSpecCache()
        self.refresh()

    def spec_files(self) -> tuple[set[str], list[tuple[int, str]]]:
        """(the dirs listed, as their files' dirname reads, and every spec file in them by priority)"""
        listed, files = set(), []
        for priority, directory in enumerate(self.spec_dirs):
            try:
                names = sorted(os.listdir(directory))
            except FileNotFoundError:
                names = []
            except OSError as exc:
                self.problems.append(Problem(directory, "$", "read", exc.strerror or str(exc)))
                continue
            listed.add(os.path.dirname(os.path.join(directory, "x")))
            files += [(priority, os.path.join(directory, n)) for n in names if n.endswith(SPEC_SUFFIXES)]
        return listed, files

    def load_spec(self, path: str) -> Spec | None:
        """The spec in path, validated (or known valid from the cache); None and a problem if not."""
        try:
            data, st = read_spec_bytes(path)
        except SpecError as exc:
            self.problems.append(Problem(path, "$", "parse", exc.what))
            return None
        except OSError as exc:
            self.problems.append(Problem(path, "$", "read", exc.strerror or str(exc)))
            return None
        if self.cache.is_valid(path, st):
            spec = self._known_valid(path, st, data)
            if spec is not None:
                return spec
            self.cache.forget(path)   # a verdict that does not hold (a damaged cache): judged again
        try:
            document = parse_spec_text(data.decode("utf-8"), path)
        except SpecError as exc:
            self.problems.append(Problem(path, "$", "parse", exc.what))
            return None
        except UnicodeDecodeError:
            self.problems.append(Problem(path, "$", "parse", "not UTF-8 text"))
            return None
        from cdi.validate import validate_document

        problems = validate_document(document, path)
        if problems:
            self.problems += problems
            return None
        try:
            spec = Spec.from_dict(document)
        except SpecError as exc:
            self.problems.append(Problem(path, exc.where or "$", "type", exc.what))
            return None
        self.cache.remember(path, st, document if is_yaml_path(path) else None)
        return spec

    def _known_valid(self, path: str, st: os.stat_result, data: bytes) -> Spec | None:
        """The spec of a file the cache says is valid: the document kept for a YAML file (no YAML
        parser needed), else the file's own JSON; None when that does not make a spec after all."""
        try:
            document = self.cache.document(path, st)
            if document is None:
                if is_yaml_path(path):
                    return None
                document = parse_spec_text(data.decode("utf-8"), path)
            return Spec.from_dict(document)
        except (SpecError, UnicodeDecodeError):
            return None

    def refresh(self) -> None:
        self.devices, self.problems, self.conflicts, self.conflicting = {}, [], [], {}
        listed, files = self.spec_files()
        for priority, path in files:
            spec = self.load_spec(path)
            if spec is None:
                continue
            for device in spec.devices:
                name = f"{spec.kind}={device.name}"
                if name in self.conflicting and self.conflicting[name][0] >= priority:
                    continue
                old = self.devices.get(name)
                if old is not None and old.priority == priority:
                    self.conflicts.append(f"device {name} defined in both {old.path} and {path}")
                    self.conflicting[name] = (priority, old.path, path)
                    del self.devices[name]
                    continue
                self.devices[name] = RegisteredDevice(name, device, spec, path, priority)
        self.cache.retain(listed, {path for _, path in files})
        self.cache.save()

    def edits_for(self, names: list[str]) -> ContainerEdits:
        """The merged edits of the named devices in request order: each spec's common edits once (before
        its first device), then each device's. Any name that is invalid or unknown fails the whole request."""
        unknown = []
        for name in names:
            try:
                parse_qualified_name(name)
            except InvalidNameError:
                unknown.append(repr(name))
                continue
            if name not in self.devices:
                if name in self.conflicting:   # the message says which files to look at
                    _, first, second = self.conflicting[name]
                    raise RequestError(f"CDI device {name} is defined in both {first} and {second}; "
                                       "remove one of them", "spec dirs " + ", ".join(self.spec_dirs))
                unknown.append(name)
        if unknown:
            raise RequestError(f"unresolvable CDI device{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}: "
                               + self._what_to_do(unknown), "spec dirs " + ", ".join(self.spec_dirs))
        edits = ContainerEdits()
        seen_specs: set[int] = set()
        for name in dict.fromkeys(names):
            registered = self.devices[name]
            if id(registered.spec) not in seen_specs:
                seen_specs.add(id(registered.spec))
                edits.append(registered.spec.container_edits)
            edits.append(registered.device.container_edits)
        return edits


    def _what_to_do(self, unknown: list[str]) -> str:
        """The next step for names the specs lack: no spec of their kind at all (none generated yet, or
        it was removed) needs `cdi generate`; a kind that is there lacks this device (`cdi list`)."""
        kinds = {name.partition("=")[0] for name in unknown if not name.startswith("'")}  # repr: invalid
        if not kinds:
            return "not a CDI device name (<vendor>/<class>=<name>)"
        missing = sorted(kind for kind in kinds if not any(d.startswith(kind + "=") for d in self.devices))
        if missing:
            return (f"no CDI spec defines {', '.join(missing)} devices; generate one: "
                    f"nvidia-ctk cdi generate --output={GENERATED_SPEC_PATH}")
        return "no such device in the specs (nvidia-ctk cdi list shows them; regenerate after a GPU change)"


def default_cache_path(environ: dict | None = None) -> str | None:
    """`$NVIDIA_CTK_CDI_CACHE_FILE` when it is set (empty or relative: None, in memory only: a relative
    path would land in whatever the cwd is, under containerd the bundle), else DEFAULT_CACHE_PATH."""
    return cache_path_in(environ, os.path.dirname(DEFAULT_CACHE_PATH))


def cache_path_in(environ: dict | None, cache_dir: str | None) -> str | None:
    """`$NVIDIA_CTK_CDI_CACHE_FILE` as default_cache_path reads it, else cdi-validated.json in cache_dir
    (the shim's `$NVIDIA_CTK_CACHE_DIR`); None (memory only) when cache_dir is None or relative."""
    environ = os.environ if environ is None else environ
    if CACHE_PATH_ENV in environ:
        value = environ[CACHE_PATH_ENV]
        return value if os.path.isabs(value) else None
    return os.path.join(cache_dir, CACHE_FILE_NAME) if cache_dir and os.path.isabs(cache_dir) else None


def open_registry(config, cache_path: str | os.PathLike | None | bool = True) -> Registry:
    """The registry of config's spec dirs (modes.cdi.spec-dirs), with verdicts kept in cache_path so that
    later container starts skip the schema for unchanged files. True: `$NVIDIA_CTK_CDI_CACHE_FILE`, else
    DEFAULT_CACHE_PATH; None: in memory only."""
    if cache_path is True:
        cache_path = default_cache_path()
    return Registry(tuple(config.cdi.spec_dirs), cache=ValidatedSpecCache(cache_path))


def inject_devices(oci: dict, names: list[str], registry: Registry) -> dict:
    """A new OCI spec with the named CDI devices applied; oci itself is never changed."""
    from cdi.apply import apply_edits

    return apply_edits(oci, registry.edits_for(names))

"""CDI spec data types and their JSON form (docs/reference.md#cdi-spec).

`from_dict` turns a parsed document into these types and rejects wrong types and unknown fields with
the JSON path of the offender; the rules of valid CDI (names, versions, required fields, patterns)
live in the schema (cdi/schema.json, cdi/validate.py), the one authority. `to_dict` writes fields in
the usual order and leaves out unset ones, as Go's `omitempty` does, so our output matches other tools.
YAML lives in cdi/spec_yaml.py so that the JSON path imports no YAML parser.
"""
from __future__ import annotations

import os

from cdi.errors import SpecError
from cdi.record import Record, field, fields

# value kinds of a field: a scalar type name, a list of one, a str->str map, or a nested record
STR, INT, BOOL, STRS, INTS, STRMAP = "str", "int", "bool", "strs", "ints", "strmap"


def _json(key: str, kind: object, default: object = None, required: bool = False) -> object:
    meta = {"json": key, "kind": kind, "required": required}
    if isinstance(default, list):
        return field(default_factory=list, metadata=meta)
    return field(default=default, metadata=meta)


class DeviceNode(Record):
    path: str = _json("path", STR, required=True)
    host_path: str | None = _json("hostPath", STR)
    type: str | None = _json("type", STR)
    major: int | None = _json("major", INT)
    minor: int | None = _json("minor", INT)
    file_mode: int | None = _json("fileMode", INT)
    permissions: str | None = _json("permissions", STR)
    uid: int | None = _json("uid", INT)
    gid: int | None = _json("gid", INT)


class Mount(Record):
    host_path: str = _json("hostPath", STR, required=True)
    container_path: str = _json("containerPath", STR, required=True)
    options: list[str] = _json("options", STRS, [])
    type: str | None = _json("type", STR)


class Hook(Record):
    hook_name: str = _json("hookName", STR, required=True)
    path: str = _json("path", STR, required=True)
    args: list[str] = _json("args", STRS, [])
    env: list[str] = _json("env", STRS, [])
    timeout: int | None = _json("timeout", INT)


class IntelRdt(Record):
    clos_id: str | None = _json("closID", STR)
    l3_cache_schema: str | None = _json("l3CacheSchema", STR)
    mem_bw_schema: str | None = _json("memBwSchema", STR)
    enable_cmt: bool | None = _json("enableCMT", BOOL)
    enable_mbm: bool | None = _json("enableMBM", BOOL)


class NetDevice(Record):
    host_interface_name: str = _json("hostInterfaceName", STR, required=True)
    name: str = _json("name", STR, required=True)


class ContainerEdits(Record):
    env: list[str] = _json("env", STRS, [])
    device_nodes: list[DeviceNode] = _json("deviceNodes", [DeviceNode], [])
    mounts: list[Mount] = _json("mounts", [Mount], [])
    hooks: list[Hook] = _json("hooks", [Hook], [])
    intel_rdt: IntelRdt | None = _json("intelRdt", IntelRdt)
    additional_gids: list[int] = _json("additionalGids", INTS, [])
    net_devices: list[NetDevice] = _json("netDevices", [NetDevice], [])

    def is_empty(self) -> bool:
        return not (self.env or self.device_nodes or self.mounts or self.hooks or self.intel_rdt
                    or self.additional_gids or self.net_devices)

    def append(self, other: ContainerEdits | None) -> ContainerEdits:
        """Add other's edits after ours (request order); a later intelRdt replaces an earlier one."""
        if other is not None:
            self.env += other.env
            self.device_nodes += other.device_nodes
            self.mounts += other.mounts
            self.hooks += other.hooks
            self.intel_rdt = other.intel_rdt or self.intel_rdt
            self.additional_gids += other.additional_gids
            self.net_devices += other.net_devices
        return self


class Device(Record):
    name: str = _json("name", STR, required=True)
    annotations: dict[str, str] = field(default_factory=dict, metadata={"json": "annotations", "kind": STRMAP})
    container_edits: ContainerEdits = _json("containerEdits", ContainerEdits, required=True)


class Spec(Record):
    version: str | None = _json("cdiVersion", STR, required=True)  # None: written as the oldest version the content needs
    kind: str = _json("kind", STR, required=True)
    annotations: dict[str, str] = field(default_factory=dict, metadata={"json": "annotations", "kind": STRMAP})
    devices: list[Device] = _json("devices", [Device], [])
    container_edits: ContainerEdits | None = _json("containerEdits", ContainerEdits)

    @classmethod
    def from_dict(cls, data: object, where: str = "$") -> Spec:
        return _from_json(cls, data, where)

    def to_dict(self) -> dict:
        from cdi.spec_version import minimum_version

        out = _to_json(self)
        # cdiVersion first, as every writer does; fill it in when the caller left it to us
        return {"cdiVersion": self.version or minimum_version(self), **{k: v for k, v in out.items()
                                                                          if k != "cdiVersion"}}

    def device(self, name: str) -> Device | None:
        return next((d for d in self.devices if d.name == name), None)


_TYPE_NAMES = {STR: "a string", INT: "an integer", BOOL: "a boolean"}


def _scalar(kind: str, value: object, where: str) -> object:
    ok = {STR: isinstance(value, str),
          INT: isinstance(value, int) and not isinstance(value, bool),
          BOOL: isinstance(value, bool)}[kind]
    if not ok:
        raise SpecError(f"expected {_TYPE_NAMES[kind]}, got {type(value).__name__}", where)
    return value


def _value(kind: object, value: object, where: str) -> object:
    if isinstance(kind, list):  # a list of nested objects
        if not isinstance(value, list):
            raise SpecError(f"expected a list, got {type(value).__name__}", where)
        return [_from_json(kind[0], v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(kind, type):  # one nested object
        return _from_json(kind, value, where)
    if kind in (STRS, INTS):
        if not isinstance(value, list):
            raise SpecError(f"expected a list, got {type(value).__name__}", where)
        item = STR if kind == STRS else INT
        return [_scalar(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if kind == STRMAP:
        if not isinstance(value, dict):
            raise SpecError(f"expected a mapping, got {type(value).__name__}", where)
        return {_scalar(STR, k, where): _scalar(STR, v, f"{where}.{k}") for k, v in value.items()}
    return _scalar(kind, value, where)


def _from_json(cls: type, data: object, where: str) -> object:
    if not isinstance(data, dict):
        raise SpecError(f"expected an object, got {type(data).__name__}", where)
    by_key = {f.metadata["json"]: f for f in fields(cls)}
    unknown = sorted(str(k) for k in data if k not in by_key)
    if unknown:
        raise SpecError(f"unknown field {unknown[0]!r}", where)
    kwargs = {}
    for key, value in data.items():
        f = by_key[key]
        kwargs[f.name] = _value(f.metadata["kind"], value, f"{where}.{key}")
    for f in fields(cls):
        if f.metadata.get("required") and f.name not in kwargs:
            raise SpecError(f"missing required field {f.metadata['json']!r}", where)
    return cls(**kwargs)


_SCALAR, _RECORDS, _RECORD, _LIST, _MAP = range(5)
_PLANS: dict[type, tuple] = {}


def _plan(cls: type) -> tuple:
    """(field name, JSON key, how to write the value) for each field of cls, worked out once per class:
    a generated spec writes thousands of records (~2 ms for 8 GPUs x 7 MIG)."""
    plan = _PLANS.get(cls)
    if plan is None:
        steps = []
        for f in fields(cls):
            kind = f.metadata["kind"]
            how = (_RECORDS if isinstance(kind, list) else _RECORD if isinstance(kind, type)
                   else _LIST if kind in (STRS, INTS) else _MAP if kind == STRMAP else _SCALAR)
            steps.append((f.name, f.metadata["json"], how))
        plan = _PLANS[cls] = tuple(steps)
    return plan


def _to_json(obj: object) -> dict:
    out = {}
    values = obj.__dict__
    for name, key, how in _plan(type(obj)):
        value = values[name]
        if value is None or value == [] or value == {}:
            continue  # omitempty
        if how == _RECORDS:
            value = [_to_json(v) for v in value]
        elif how == _RECORD:
            value = _to_json(value)
            if not value:
                continue
        elif how == _LIST:
            value = list(value)
        elif how == _MAP:
            value = dict(value)
        out[key] = value
    return out


# --- files -----------------------------------------------------------------------------------------

def is_yaml_path(path: str | os.PathLike) -> bool:
    return str(path).endswith((".yaml", ".yml"))


def parse_spec_text(text: str | bytes, path: str, yaml_format: bool | None = None) -> dict:
    """The raw document of a spec file (JSON, or YAML with names kept as strings)."""
    if yaml_format is None:
        yaml_format = is_yaml_path(path)
    if yaml_format:
        from cdi.spec_yaml import load_yaml_document  # imported only when a YAML spec is read

        document = load_yaml_document(text, path)
    else:
        from cdi import json_codec   # json_codec: a GPU container's create reads specs without json/re

        try:
            document = json_codec.loads(text)
        except (ValueError, RecursionError) as exc:
            raise SpecError(f"invalid JSON: {exc}", path) from None
    # strict UTF-8 cannot carry a surrogate: only an escape (JSON's \uD800, YAML's \uD800 or \U0000D800)
    # can make one, so the walk runs only when the text has such an escape
    escapes = (b"\\u", b"\\U") if isinstance(text, bytes) else ("\\u", "\\U")
    if escapes[0] in text or escapes[1] in text:
        _refuse_lone_surrogates(document, path)
    return document


def _refuse_lone_surrogates(document: object, path: str) -> None:
    """A string (or key) holding a lone surrogate cannot be written out as UTF-8 (into config.json, by
    the runtime) and no spec writer makes one: the spec is invalid."""
    stack = [document]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack += value
            stack += value.values()
        elif isinstance(value, list):
            stack += value
        elif isinstance(value, str) and not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise SpecError("invalid spec: a string holds a lone surrogate", path) from None


def _check_hook_env(spec: Spec, where: str) -> None:
    """Project rule (docs/reference.md#hook-env): every hook we write carries a non-empty env. Engines
    drop an empty one, and the hook then runs with the image's environment (runc) or the engine's (crun)."""
    edits = [("$.containerEdits", spec.container_edits)] + \
        [(f"$.devices[{i}].containerEdits", d.container_edits) for i, d in enumerate(spec.devices)]
    for at, e in edits:
        for j, hook in enumerate(e.hooks if e else []):
            if not hook.env:
                raise SpecError(f"{at}.hooks[{j}]: a hook we write must carry a non-empty env", where)


def _yaml_text(document: dict) -> str:
    """The document as cdi.spec_yaml writes it: by cdi.yaml_plain when it can be sure of the very same
    text (a generated spec; no PyYAML import), else by PyYAML."""
    from cdi.yaml_plain import dump_plain_yaml

    text = dump_plain_yaml(document)
    if text is None:
        from cdi.spec_yaml import dump_yaml_document

        text = dump_yaml_document(document)
    return text


def render_spec(spec: Spec, where: str, yaml_format: bool = False, own_hooks: bool = True) -> str:
    """The spec as JSON or YAML text, checked first as write_spec checks it (SpecError naming `where`).
    own_hooks=False: the hooks are someone else's, passed on as they are (`cdi transform`), so the rule
    for the hooks this toolkit writes (_check_hook_env) is not theirs."""
    from cdi.validate import validate_document

    document = spec.to_dict()
    validate_document(document, where, raise_first=True)
    if own_hooks:
        _check_hook_env(spec, where)
    if yaml_format:
        return _yaml_text(document)
    import json

    return json.dumps(document, indent=2) + "\n"


def write_spec(spec: Spec, path: str | os.PathLike, mode: int = 0o644,
               yaml_format: bool | None = None, own_hooks: bool = True) -> str | os.PathLike:
    """Write spec to path (format by extension, unless yaml_format says) through a temp file and a
    rename, so a reader never sees half a spec; the content is validated first, so we never write a
    spec consumers reject. Returns path as given. A path that is (or links to) a device, FIFO or socket
    is refused: the rename would put a regular file in its place (`--output /dev/null` once replaced
    the host's /dev/null)."""
    import stat

    from cdi.new_file import create_new_file   # only when writing: reading specs imports neither

    name = os.fspath(path)
    text = render_spec(spec, name, is_yaml_path(name) if yaml_format is None else yaml_format, own_hooks)
    try:
        st = os.stat(name)
    except FileNotFoundError:
        pass
    else:
        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) or stat.S_ISFIFO(st.st_mode) \
                or stat.S_ISSOCK(st.st_mode):
            raise SpecError("not a regular file: writing the spec (a new file renamed over the path) would "
                            "replace it", name)
    folder, base = os.path.split(name)
    fd, tmp = create_new_file(folder, f".{base}.", ".tmp", 0o600, token_bytes=6)   # as tempfile.mkstemp
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(text.encode("utf-8"))
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, name)
    except BaseException:
        os.unlink(tmp)
        raise
    return path

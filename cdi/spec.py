"""CDI spec data types and their JSON form (docs/reference.md#cdi-spec).

`from_dict` turns a parsed document into these types and rejects wrong types and unknown fields with
the JSON path of the offender; the rules of valid CDI (names, versions, required fields, patterns)
live in the schema (cdi/schema.json, cdi/validate.py), the one authority. `to_dict` writes fields in
the usual order and leaves out unset ones, as Go's `omitempty` does, so our output matches other tools.
YAML lives in cdi/spec_yaml.py so that the JSON path imports no YAML parser; reading and writing spec
files in cdi/spec_file.py.
"""
from __future__ import annotations


from cdi.errors import SpecError
from cdi.record import Record, field, fields
from cdi.spec_version import minimum_version_of

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
        out = _to_json(self)
        # cdiVersion first, as every writer does; fill it in when the caller left it to us
        return {"cdiVersion": self.version or minimum_version_of(out)[0],
                **{k: v for k, v in out.items() if k != "cdiVersion"}}

    def written_version(self) -> str:
        """The cdiVersion to_dict writes: the spec's own, else the oldest one its content needs."""
        return self.version or minimum_version_of(_to_json(self))[0]

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

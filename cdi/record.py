"""Record: the part of dataclasses that our data types use, without importing dataclasses.

Why not dataclasses: the hook runs at every GPU container start. `import dataclasses` imports inspect
(and through it ast, dis, tokenize, ...), several milliseconds, and every @dataclass then writes its
__init__, __eq__, __repr__ ... as source text and compiles it while the module is imported, about half
a millisecond a class. The hook's path holds some thirty data types: that was a third of its run
time. A Record declares its fields the same way, but its methods are shared and generic, so defining
a class costs no compilation.

    class Mount(Record):
        host_path: str
        options: list[str] = field(default_factory=list)

    class Gpu(Record, frozen=True):
        index: int
        mig_devices: tuple[MigDevice, ...] = ()

What a Record does, as a dataclass would: fields are the annotated names of the class (and of Record
bases) in order; construction by position or keyword, with defaults and default factories; equality
between records of the same class over the fields compared; repr; `frozen=True` forbids assignment
and makes records hashable (a mutable record is unhashable, as with dataclasses). A `__post_init__`
method is called after construction. fields(), replace() and asdict() work as their dataclasses
namesakes do. Annotations are only names here: nothing checks types.
"""
from __future__ import annotations


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()  # "no default": a field without one must be given to the constructor


class FrozenInstanceError(AttributeError):
    """Assignment to a field of a frozen record (an AttributeError, as with dataclasses)."""


class Field:
    __slots__ = ("name", "default", "default_factory", "metadata", "compare", "repr")

    def __init__(self, default: object = MISSING, default_factory: object = MISSING,
                 metadata: dict | None = None, compare: bool = True, repr: bool = True) -> None:
        if default is not MISSING and default_factory is not MISSING:
            raise ValueError("a field cannot have both a default and a default_factory")
        self.name = ""  # set when the class is created
        self.default = default
        self.default_factory = default_factory
        self.metadata = metadata or {}
        self.compare = compare
        self.repr = repr

    def initial_value(self, owner: type) -> object:
        """The value when the constructor is not given one."""
        if self.default is not MISSING:
            return self.default
        if self.default_factory is not MISSING:
            return self.default_factory()
        raise TypeError(f"{owner.__qualname__}() missing required argument: {self.name!r}")

    def __repr__(self) -> str:
        return f"Field(name={self.name!r}, default={self.default!r}, metadata={self.metadata!r})"


def field(*, default: object = MISSING, default_factory: object = MISSING, metadata: dict | None = None,
          compare: bool = True, repr: bool = True) -> object:
    """A field's options, as the class attribute's value (dataclasses.field's signature)."""
    return Field(default, default_factory, metadata, compare, repr)


class Record:
    __record_fields__: tuple[Field, ...] = ()

    def __init_subclass__(cls, frozen: bool = False, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        by_name = {f.name: f for f in cls.__record_fields__}  # the bases' fields come first
        for name in cls.__dict__.get("__annotations__", {}):
            value = cls.__dict__.get(name, MISSING)
            if isinstance(value, (list, dict, set)):   # one object shared by every record: a bug
                raise ValueError(f"mutable default for field {name!r}: use field(default_factory=...)")
            f = value if isinstance(value, Field) else Field(default=value)
            f.name = name
            if isinstance(value, Field):
                # like dataclasses: the class attribute is the plain default, or absent
                if f.default is MISSING:
                    delattr(cls, name)
                else:
                    setattr(cls, name, f.default)
            by_name.pop(name, None)
            by_name[name] = f
        cls.__record_fields__ = tuple(by_name.values())
        if frozen:
            cls.__setattr__ = _refuse_assignment
            cls.__delattr__ = _refuse_deletion
        if cls.__dict__.get("__hash__") is None:  # a __hash__ of the class's own stays
            cls.__hash__ = Record.__record_hash__ if frozen else None

    def __init__(self, *args: object, **kwargs: object) -> None:
        fields_ = self.__record_fields__
        if len(args) > len(fields_):
            raise TypeError(f"{type(self).__qualname__}() takes {len(fields_)} positional arguments "
                            f"but {len(args)} were given")
        values = self.__dict__
        for f, value in zip(fields_, args):
            if f.name in kwargs:
                raise TypeError(f"{type(self).__qualname__}() got multiple values for argument {f.name!r}")
            values[f.name] = value
        for f in fields_[len(args):]:
            value = kwargs.pop(f.name, MISSING)
            values[f.name] = f.initial_value(type(self)) if value is MISSING else value
        if kwargs:
            raise TypeError(f"{type(self).__qualname__}() got an unexpected keyword argument "
                            f"{next(iter(kwargs))!r}")
        post_init = getattr(self, "__post_init__", None)
        if post_init is not None:
            post_init()

    def __record_key__(self) -> tuple:
        values = self.__dict__
        return tuple(values[f.name] for f in self.__record_fields__ if f.compare)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self.__record_key__() == other.__record_key__()

    def __record_hash__(self) -> int:
        return hash(self.__record_key__())

    def __repr__(self) -> str:
        values = self.__dict__
        shown = ", ".join(f"{f.name}={values[f.name]!r}" for f in self.__record_fields__ if f.repr)
        return f"{type(self).__qualname__}({shown})"


def _refuse_assignment(self: Record, name: str, value: object) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _refuse_deletion(self: Record, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


def is_record(obj: object) -> bool:
    """True for a Record class or instance."""
    return isinstance(obj, Record) or (isinstance(obj, type) and issubclass(obj, Record))


def fields(class_or_record: type | Record) -> tuple[Field, ...]:
    if not is_record(class_or_record):
        raise TypeError("fields() takes a Record class or instance")
    return class_or_record.__record_fields__


def replace(record: Record, **changes: object) -> Record:
    """A copy of record with the given fields changed (built through the constructor, so
    __post_init__ runs again, as with dataclasses.replace)."""
    values = {f.name: record.__dict__[f.name] for f in record.__record_fields__}
    for name in changes:
        if name not in values:
            raise TypeError(f"{type(record).__qualname__} has no field {name!r}")
    values.update(changes)
    return type(record)(**values)


def deep_copy(value: object) -> object:
    """copy.deepcopy for records, JSON documents and the lists, tuples and dicts they hold (anything
    else is shared, as deepcopy shares str, int and other immutable values), without importing copy
    (and weakref, types, copyreg) on a GPU container's start path. Records are rebuilt through their
    constructor, as replace() does."""
    if isinstance(value, Record):
        return type(value)(**{f.name: deep_copy(value.__dict__[f.name]) for f in value.__record_fields__})
    if isinstance(value, list):
        return [deep_copy(item) for item in value]
    if isinstance(value, tuple):
        return tuple(deep_copy(item) for item in value)
    if isinstance(value, dict):
        return {key: deep_copy(item) for key, item in value.items()}
    return value


def asdict(record: Record) -> dict:
    """Fields as a dict, records nested in records, lists, tuples and dicts turned into dicts too."""
    if not isinstance(record, Record):
        raise TypeError("asdict() takes a Record instance")
    return _plain(record)


def _plain(value: object) -> object:
    if isinstance(value, Record):
        return {f.name: _plain(value.__dict__[f.name]) for f in value.__record_fields__}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    return value

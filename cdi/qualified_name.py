"""CDI device names: `vendor/class=name`, and kinds `vendor/class` (docs/reference.md#cdi-names).

vendor and class start with a letter, end with a letter or digit and hold `[A-Za-z0-9_.-]` in between;
a device name starts and ends with a letter or digit and may also hold `:` (MIG pairs like `0:1`).
Dots in a class are a 0.6.0 feature; the parser accepts them and cdi.spec_version asks for 0.6.0.
"""
from __future__ import annotations

from cdi.errors import InvalidNameError
from cdi.record import Record

# Long enough for any real name; bounds what a hostile annotation can make us carry around.
MAX_NAME_LENGTH = 256

_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_ALNUM = _LETTERS + "0123456789"
# (first, any, last): the allowed characters. Plain string tests, not re: every container start
# checks a kind, and importing re costs more than the rest of this module (cdi.lazy_pattern).
_VENDOR_OR_CLASS = (_LETTERS, _ALNUM + "_.-", _ALNUM)
_DEVICE_NAME = (_ALNUM, _ALNUM + "_.:-", _ALNUM)

# The same rules as one pattern each, for the JSON schema (cdi/schema.json keeps copies of these).
KIND_PATTERN = r"^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?/[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?$"
NAME_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$"


class QualifiedName(Record, frozen=True):
    vendor: str
    cls: str
    name: str

    @property
    def kind(self) -> str:
        return f"{self.vendor}/{self.cls}"

    def __str__(self) -> str:
        return f"{self.vendor}/{self.cls}={self.name}"


def _check(label: str, value: str, chars: tuple[str, str, str], rule: str) -> None:
    if not value:
        raise InvalidNameError(f"empty {label}")
    if len(value) > MAX_NAME_LENGTH:
        raise InvalidNameError(f"{label} longer than {MAX_NAME_LENGTH} characters")
    first, any_, last = chars
    if value[0] not in first or value[-1] not in last or value.strip(any_):
        raise InvalidNameError(f"invalid {label} {value!r}: {rule}")


_VC_RULE = "must start with a letter, end with a letter or digit, and hold only letters, digits, '_', '.', '-'"
_NAME_RULE = "must start and end with a letter or digit and hold only letters, digits, '_', '.', ':', '-'"


def validate_vendor(vendor: str) -> None:
    _check("vendor", vendor, _VENDOR_OR_CLASS, _VC_RULE)


def validate_class(cls: str) -> None:
    _check("class", cls, _VENDOR_OR_CLASS, _VC_RULE)


def validate_device_name(name: str) -> None:
    _check("device name", name, _DEVICE_NAME, _NAME_RULE)


def parse_kind(kind: str) -> tuple[str, str]:
    """`vendor/class` -> (vendor, class), or InvalidNameError."""
    if not isinstance(kind, str):
        raise InvalidNameError(f"kind must be a string, not {type(kind).__name__}")
    vendor, sep, cls = kind.partition("/")
    if not sep:
        raise InvalidNameError(f"invalid kind {kind!r}: expected vendor/class")
    validate_vendor(vendor)
    validate_class(cls)
    return vendor, cls


def parse_qualified_name(text: str) -> QualifiedName:
    """`vendor/class=name` -> QualifiedName, or InvalidNameError naming what is wrong."""
    if not isinstance(text, str):
        raise InvalidNameError(f"device name must be a string, not {type(text).__name__}")
    kind, sep, name = text.partition("=")
    if not sep or "/" not in kind:
        raise InvalidNameError(f"{text!r} is not a qualified CDI device name (vendor/class=name)")
    vendor, cls = parse_kind(kind)
    validate_device_name(name)
    return QualifiedName(vendor, cls, name)


def is_qualified_name(text: str) -> bool:
    try:
        parse_qualified_name(text)
    except InvalidNameError:
        return False
    return True


def qualify(kind: str, name: str) -> str:
    """The qualified name of device `name` of `kind`, checked."""
    vendor, cls = parse_kind(kind)
    validate_device_name(name)
    return f"{vendor}/{cls}={name}"

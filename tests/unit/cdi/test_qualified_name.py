import pytest

from cdi.errors import InvalidNameError
from cdi.qualified_name import is_qualified_name, parse_kind, parse_qualified_name, qualify


@pytest.mark.parametrize("text, parts", [
    ("nvidia.com/gpu=0", ("nvidia.com", "gpu", "0")),
    ("nvidia.com/gpu=all", ("nvidia.com", "gpu", "all")),
    ("nvidia.com/gpu=1:0", ("nvidia.com", "gpu", "1:0")),
    ("nvidia.com/gpu=GPU-8b5a6e1c-0000-1111-2222-333344445555", ("nvidia.com", "gpu", "GPU-8b5a6e1c-0000-1111-2222-333344445555")),
    ("vendor.example/cls=dev0", ("vendor.example", "cls", "dev0")),
    ("v/c.sub=x", ("v", "c.sub", "x")),
    ("a/b=c=d", None),
])
def test_parse(text, parts):
    if parts is None:
        with pytest.raises(InvalidNameError):
            parse_qualified_name(text)
        return
    name = parse_qualified_name(text)
    assert (name.vendor, name.cls, name.name) == parts
    assert str(name) == text
    assert name.kind == f"{parts[0]}/{parts[1]}"


@pytest.mark.parametrize("text", [
    "", "gpu=0", "nvidia.com=0", "nvidia.com/gpu", "nvidia.com/gpu=", "/gpu=0", "nvidia.com/=0",
    "1vendor/gpu=0", "vendor-/gpu=0", "vendor/gpu_=0", "vendor/gpu=-0", "vendor/gpu=0-", "vendor/gpu=a b",
    "vendor/gpu=a/b", "vendor/gpu=a\n", "vendor/gpu=\x00", "vendor/g/pu=0", "ve ndor/gpu=0",
    "vendor/gpu=" + "a" * 300,
])
def test_invalid_names_are_rejected_with_a_reason(text):
    with pytest.raises(InvalidNameError) as info:
        parse_qualified_name(text)
    assert str(info.value)  # a message, never empty
    assert not is_qualified_name(text)


def test_non_string_is_an_error_not_a_crash():
    with pytest.raises(InvalidNameError):
        parse_qualified_name(7)
    with pytest.raises(InvalidNameError):
        parse_kind(None)


def test_qualify_checks_both_parts():
    assert qualify("nvidia.com/gpu", "0") == "nvidia.com/gpu=0"
    with pytest.raises(InvalidNameError):
        qualify("nvidia.com/gpu", "..")
    with pytest.raises(InvalidNameError):
        qualify("nvidia.com", "0")

"""cdi.record.Record behaves as the dataclasses it replaces did: construction, defaults, equality,
hashing, frozen records, fields/replace/asdict; and importing it (with the hook's data types) loads
no dataclasses."""
import copy
import subprocess
import sys
from pathlib import Path

import pytest

from cdi.record import MISSING, FrozenInstanceError, Record, asdict, deep_copy, field, fields, is_record, replace


class Point(Record, frozen=True):
    x: int
    y: int = 0
    tags: tuple[str, ...] = field(default_factory=tuple, metadata={"json": "tags"})


class Box(Record):
    items: list[Point] = field(default_factory=list)
    label: str = ""
    note: str = field(default="", compare=False, repr=False)


def test_construction_by_position_and_keyword_with_defaults():
    assert Point(1) == Point(x=1, y=0, tags=())
    assert (Point(1, 2).x, Point(1, 2).y) == (1, 2)
    assert Box().items == [] and Box().items is not Box().items  # a fresh list each time
    with pytest.raises(TypeError, match="missing required argument: 'x'"):
        Point()
    with pytest.raises(TypeError, match="unexpected keyword argument 'z'"):
        Point(1, z=3)
    with pytest.raises(TypeError, match="multiple values for argument 'x'"):
        Point(1, x=2)
    with pytest.raises(TypeError, match="positional arguments"):
        Point(1, 2, (), 4)


def test_equality_hash_and_repr():
    assert Point(1, 2) != Point(2, 1)
    assert Point(1) != (1, 0, ())  # only records of the same class compare equal
    assert hash(Point(1, 2)) == hash(Point(1, 2))
    assert len({Point(1), Point(1), Point(2)}) == 2
    assert repr(Point(1, 2)) == "Point(x=1, y=2, tags=())"
    assert Box(label="a", note="x") == Box(label="a", note="y")  # compare=False
    assert repr(Box(label="a", note="x")) == "Box(items=[], label='a')"  # repr=False
    with pytest.raises(TypeError):
        hash(Box())  # mutable: unhashable, as a dataclass


def test_frozen_records_refuse_assignment_mutable_ones_allow_it():
    p = Point(1)
    with pytest.raises(FrozenInstanceError):
        p.x = 2
    with pytest.raises(AttributeError):
        del p.y
    b = Box()
    b.label = "new"
    b.items += [p]
    assert b == Box([Point(1)], "new")


def test_fields_replace_asdict():
    assert [f.name for f in fields(Point)] == ["x", "y", "tags"]
    assert fields(Point(1))[2].metadata == {"json": "tags"}
    assert fields(Point)[0].default is MISSING and fields(Point)[1].default == 0
    assert fields(Point)[2].default_factory is tuple
    assert Point.y == 0 and not hasattr(Point, "tags") and not hasattr(Point, "x")  # dataclass-like
    assert replace(Point(1, 2), y=5) == Point(1, 5)
    with pytest.raises(TypeError):
        replace(Point(1), z=1)
    assert asdict(Box([Point(1, tags=("a",))], "b")) == {
        "items": [{"x": 1, "y": 0, "tags": ("a",)}], "label": "b", "note": ""}
    assert is_record(Point) and is_record(Point(1)) and not is_record(object()) and not is_record(dict)
    with pytest.raises(TypeError):
        fields(object())
    with pytest.raises(ValueError, match="mutable default"):
        class Shared(Record):
            items: list = []


def test_inheritance_post_init_and_copies():
    class Base(Record):
        a: int = 1

    class Child(Base, frozen=True):
        b: int = 2

        def __post_init__(self):
            if self.b < 0:
                raise ValueError("b")

    assert [f.name for f in fields(Child)] == ["a", "b"]
    assert Child(5, 6) == Child(a=5, b=6)
    with pytest.raises(ValueError):
        Child(b=-1)
    original = Box([Point(1)], "x")
    assert copy.copy(original) == original and copy.deepcopy(original) == original
    assert copy.deepcopy(Point(1, 2)) == Point(1, 2)


def test_deep_copy_copies_records_and_containers_as_deepcopy_does():
    original = Box([Point(1, 2, ("a",))], "x", note="kept")
    nested = {"boxes": [original, (original, {"k": [1, 2]})]}
    copied = deep_copy(nested)
    assert copied == copy.deepcopy(nested) == nested
    assert copied["boxes"][0] is not original and copied["boxes"][0].items is not original.items
    assert copied["boxes"][0].note == "kept"            # fields not compared are copied too
    copied["boxes"][0].items.append(Point(3))
    copied["boxes"][1][1]["k"].append(3)
    assert original.items == [Point(1, 2, ("a",))] and nested["boxes"][1][1]["k"] == [1, 2]


def test_the_hooks_data_types_import_no_dataclasses():
    repo = str(Path(__file__).resolve().parents[3])
    code = (f"import sys; sys.path.insert(0, {repo!r})\n"
            "import cdi.config, cdi.request, cdi.selection, cdi.spec, cdi.discover, cdi.ldcache\n"
            "print('dataclasses' in sys.modules, 'inspect' in sys.modules)")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]

"""NVIDIA_REQUIRE_* constraints: parsing and evaluation against an inventory (docs/reference.md#require).

Each variable must hold; within one, space-separated alternatives are ORed and the comma-separated
terms of an alternative ANDed. A term is `<key><op><value>`: keys cuda, driver, arch compare dotted
versions with = != < <= > >=; brand compares names with = and != only. Evaluated for every selected
GPU (a MIG device by its parent), so `arch>=8.0` with two GPUs needs both to be Ampere or later.
"""
from __future__ import annotations

from cdi.errors import RequirementError
from cdi.lazy_pattern import LazyPattern
from cdi.record import Record

TYPE_CHECKING = False   # typing.TYPE_CHECKING without importing typing (nor collections, for one name)
if TYPE_CHECKING:
    from collections.abc import Iterable

    from cdi.inventory import Gpu, Inventory

REQUIRE_PREFIX = "NVIDIA_REQUIRE_"
VERSION_KEYS = ("cuda", "driver", "arch")
MAX_REQUIREMENT_LENGTH = 4096

_TERM = LazyPattern(r"^([A-Za-z]+)(!=|<=|>=|=|<|>)(.*)$")
_VERSION = LazyPattern(r"^[0-9]{1,9}(\.[0-9]{1,9}){0,3}$")
_BRAND = LazyPattern(r"^[A-Za-z0-9_-]{1,64}$")


class Constraint(Record, frozen=True):
    key: str
    op: str
    value: str

    def __str__(self) -> str:
        return f"{self.key}{self.op}{self.value}"

    def holds(self, inventory: Inventory, gpu: Gpu | None) -> bool:
        if self.key in ("arch", "brand") and gpu is None:
            return True  # no device to contradict a per-device condition
        fact = {"cuda": inventory.cuda_version, "driver": inventory.driver_version,
                "arch": gpu.compute_capability if gpu else "", "brand": gpu.brand if gpu else ""}[self.key]
        if self.key == "brand":
            equal = _brand_key(fact) == _brand_key(self.value)
            return equal if self.op == "=" else not equal
        if not _VERSION.match(fact or ""):
            return False  # a fact we do not know cannot satisfy anything
        a, b = _version(fact), _version(self.value)
        return {"=": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[self.op]


class Requirement(Record, frozen=True):
    variable: str
    alternatives: tuple[tuple[Constraint, ...], ...]  # OR of ANDs

    def holds(self, inventory: Inventory, gpu: Gpu | None) -> bool:
        return any(all(c.holds(inventory, gpu) for c in terms) for terms in self.alternatives)

    def __str__(self) -> str:
        return " ".join(",".join(map(str, terms)) for terms in self.alternatives)


def _version(text: str) -> tuple[int, ...]:
    parts = tuple(int(p) for p in text.split("."))
    return parts + (0,) * (4 - len(parts))


def _brand_key(name: str) -> str:
    import re   # only when a brand is required (cdi.lazy_pattern)

    return re.sub(r"[^a-z0-9]", "", name.lower())


def parse_constraint(term: str, variable: str) -> Constraint:
    match = _TERM.match(term)
    if not match:
        raise RequirementError(f"malformed requirement {term!r}: expected <key><op><value>", variable)
    key, op, value = match.group(1).lower(), match.group(2), match.group(3)
    if key in VERSION_KEYS:
        if not _VERSION.match(value):
            raise RequirementError(f"malformed version {value!r} in {term!r}", variable)
    elif key == "brand":
        if op not in ("=", "!="):
            raise RequirementError(f"brand takes only = or !=, not {op!r} in {term!r}", variable)
        if not _BRAND.match(value):
            raise RequirementError(f"malformed brand {value!r} in {term!r}", variable)
    else:
        raise RequirementError(f"unknown requirement key {key!r} in {term!r} (cuda, driver, arch, brand)", variable)
    return Constraint(key, op, value)


def parse_requirement(variable: str, value: str) -> Requirement | None:
    """One NVIDIA_REQUIRE_* variable; None when it is empty."""
    if len(value) > MAX_REQUIREMENT_LENGTH:
        raise RequirementError(f"requirement longer than {MAX_REQUIREMENT_LENGTH} characters", variable)
    alternatives = []
    for alternative in value.split():
        terms = [t for t in alternative.split(",") if t]
        if terms:
            alternatives.append(tuple(parse_constraint(t, variable) for t in terms))
    return Requirement(variable, tuple(alternatives)) if alternatives else None


def cuda_version_requirement(cuda_version: str) -> Requirement:
    """What a legacy image's CUDA_VERSION (e.g. 9.0.176) asks for: cuda>=major.minor."""
    import re   # only for a legacy image (cdi.lazy_pattern)

    match = re.match(r"^([0-9]{1,9})\.([0-9]{1,9})(\.[0-9]{1,9})*$", cuda_version.strip())
    if not match:
        raise RequirementError(f"malformed CUDA_VERSION {cuda_version!r}", "CUDA_VERSION")
    constraint = Constraint("cuda", ">=", f"{match.group(1)}.{match.group(2)}")
    return Requirement("CUDA_VERSION", ((constraint,),))


def requirements_from_env(env: dict[str, str], legacy_image: bool) -> tuple[Requirement, ...]:
    """Every NVIDIA_REQUIRE_* of a container environment, in name order, plus CUDA_VERSION's on a legacy image."""
    found = []
    for name in sorted(env):
        if name.startswith(REQUIRE_PREFIX):
            requirement = parse_requirement(name, env[name])
            if requirement is not None:
                found.append(requirement)
    if legacy_image and env.get("CUDA_VERSION"):
        found.append(cuda_version_requirement(env["CUDA_VERSION"]))
    return tuple(found)


def check_requirements(requirements: Iterable[Requirement], inventory: Inventory, gpus: Iterable[Gpu]) -> None:
    """Raise RequirementError for the first requirement a selected GPU does not meet."""
    gpus = list(gpus)
    for requirement in requirements:
        for gpu in gpus or [None]:
            if not requirement.holds(inventory, gpu):
                where = requirement.variable + (f", GPU {gpu.index}" if gpu is not None else "")
                facts = f"cuda {inventory.cuda_version or '?'}, driver {inventory.driver_version or '?'}"
                if gpu is not None:
                    facts += f", arch {gpu.compute_capability}, brand {gpu.brand}"
                raise RequirementError(f"unsatisfied condition {str(requirement)!r}: this host has {facts}", where)

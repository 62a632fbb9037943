"""Random wrong-shaped JSON documents for the parsers' property tests: a valid document with a few of its
members replaced by random values (scalars, lists, objects) or removed. Seeded by the caller."""
from __future__ import annotations

import random


def random_value(rng: random.Random, scalars: list, keys: list[str], depth: int = 0) -> object:
    """A scalar from `scalars`, or a small list or object (member names from `keys`) up to 3 deep."""
    choice = rng.randrange(3 if depth < 3 else 1)
    if choice == 0:
        return rng.choice(scalars)
    if choice == 1:
        return [random_value(rng, scalars, keys, depth + 1) for _ in range(rng.randrange(3))]
    return {rng.choice(keys): random_value(rng, scalars, keys, depth + 1) for _ in range(rng.randrange(3))}


def member_paths(value: object, path: tuple = ()) -> list[tuple]:
    """Every place in a document as a path of keys and indices, the document itself first (`()`)."""
    found = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            found += member_paths(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found += member_paths(v, path + (i,))
    return found


def replace_or_remove(document: object, path: tuple, rng: random.Random, scalars: list, keys: list[str]) -> None:
    """Puts a random value at `path` (not the root); an object's member is removed instead one time in five."""
    parent = document
    for step in path[:-1]:
        parent = parent[step]
    if isinstance(parent, dict) and rng.random() < 0.2:
        del parent[path[-1]]
    else:
        parent[path[-1]] = random_value(rng, scalars, keys)

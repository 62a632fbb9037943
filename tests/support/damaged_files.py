"""Damaged copies of a file the toolkit wrote (a cache entry): cut short, at a line boundary or inside
a line, or with one bit flipped, as a full disk, a crash or a bad block leaves them."""
from __future__ import annotations

import random
from collections.abc import Iterator


def damaged_copies(data: bytes, offsets: int = 32, flips: int = 24) -> Iterator[tuple[str, bytes]]:
    """(what, damaged bytes): data cut at every line boundary, cut at offsets byte offsets spread over
    it, and with one bit flipped at flips places (a seeded choice: the same places each run)."""
    cuts = {i + 1 for i, byte in enumerate(data) if byte == ord("\n")}
    cuts |= set(range(0, len(data), max(1, len(data) // offsets)))
    for cut in sorted(cuts - {len(data)}):
        yield f"cut at {cut} of {len(data)}", data[:cut]
    rng = random.Random(len(data))
    for at in sorted(rng.sample(range(len(data)), min(flips, len(data)))):
        bit = 1 << rng.randrange(8)
        yield f"bit {bit} flipped at {at}", data[:at] + bytes([data[at] ^ bit]) + data[at + 1:]


def spread(items: list, count: int) -> list:
    """At most count of items, spread evenly over them (all when there are fewer)."""
    step = max(1, -(-len(items) // count))
    return items[::step]

"""Shared helpers for the cdi unit tests: small valid spec documents to vary."""
from __future__ import annotations

import copy

import pytest

BASE_DOCUMENT = {
    "cdiVersion": "0.3.0",
    "kind": "vendor.example/cls",
    "devices": [
        {"name": "dev0", "containerEdits": {"env": ["A=1"]}},
    ],
}


@pytest.fixture
def document():
    """A fresh minimal valid spec document (a dict) for a test to change."""
    return copy.deepcopy(BASE_DOCUMENT)

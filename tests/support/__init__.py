"""Helpers shared by the unit, e2e and security tests (one copy of each; import from here)."""

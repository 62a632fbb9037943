"""The small C helper (cffi, API mode) and its thin Python wrapper, plus the static launcher."""

"""The small C helper (cffi, API mode) and its thin Python wrapper, plus the static launcher and
nvidia-cdi-hook, a C program built into it (cdi_hook/)."""

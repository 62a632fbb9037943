"""Helpers of packaging/build_packages.py (imported by path: packaging/ is deliberately not a Python
package, so it never shadows the `packaging` distribution that pip and setuptools import)."""

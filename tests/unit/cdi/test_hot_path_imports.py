"""The container start path imports cdi.request, cdi.config, cdi.apply, cdi.spec and reads JSON specs
through cdi.registry: none of that may pull in jsonschema, yaml or click (docs/reference.md#import-costs),
once the spec files have been validated (and, for YAML, their documents kept) by an earlier run."""
import json
import subprocess
import sys

PROBE = r"""
import json, sys
import cdi.request, cdi.config, cdi.apply, cdi.spec, cdi.selection, cdi.registry, cdi.require, cdi.annotations
from cdi.registry import Registry, ValidatedSpecCache
cache = ValidatedSpecCache()
first = Registry((sys.argv[1],), cache=cache)          # validates: the compiled schema, no jsonschema
before = {m for m in ("jsonschema", "yaml", "click") if m in sys.modules}
print(json.dumps(sorted(before)))
"""

HOT = r"""
import json, sys
import cdi.request, cdi.config, cdi.apply, cdi.spec, cdi.selection, cdi.registry, cdi.require, cdi.annotations
from cdi.config import load_config
from cdi.request import resolve_device_request
from cdi.registry import Registry, ValidatedSpecCache, inject_devices
config = load_config()
request = resolve_device_request({"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}}, config)
registry = Registry((sys.argv[1],), cache=ValidatedSpecCache(sys.argv[2]))   # cached verdicts
spec = inject_devices({"process": {"env": []}}, ["vendor.example/cls=dev0", "other.example/k=1:0"], registry)
assert spec["process"]["env"] == ["A=1", "B=1"], spec
print(json.dumps(sorted(m for m in ("jsonschema", "yaml", "click") if m in sys.modules)))
"""


def run(code, *args, env=None):
    result = subprocess.run([sys.executable, "-I", "-c", code, *args], capture_output=True, text=True,
                            cwd=str(__import__("pathlib").Path(__file__).resolve().parents[3]), env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_start_path_imports_no_heavy_modules(tmp_path):
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "a.json").write_text(json.dumps({"cdiVersion": "0.3.0", "kind": "vendor.example/cls",
                                              "devices": [{"name": "dev0", "containerEdits": {"env": ["A=1"]}}]}))
    (specs / "b.yaml").write_text('cdiVersion: 0.5.0\nkind: other.example/k\ndevices:\n- name: "1:0"\n'
                                  '  containerEdits: {env: [B=1]}\n')
    cache_file = tmp_path / "cache.json"
    env = {"NVIDIA_CTK_CONFIG_FILE_PATH": str(tmp_path / "none.toml"), "PATH": "/usr/bin:/bin"}
    # first run: the spec is unknown and must be validated (and the verdict kept); valid specs need
    # only the compiled form of the schema (cdi.schema_check), not jsonschema
    fill = PROBE.replace("cache = ValidatedSpecCache()", f"cache = ValidatedSpecCache({str(cache_file)!r})")
    assert run(fill, str(specs), env=env) == ["yaml"]
    assert cache_file.exists()
    # then the hot path: nothing heavy, not even for the YAML spec
    assert run(HOT, str(specs), str(cache_file), env=env) == []

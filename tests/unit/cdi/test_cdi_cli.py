"""`nvidia-ctk cdi validate` and `nvidia-ctk cdi list`: exit codes and one-line messages."""
import json


from ctk.main import main


def write_spec(path, kind="vendor.example/cls", names=("dev0",)):
    path.write_text(json.dumps({"cdiVersion": "0.5.0", "kind": kind,
                                "devices": [{"name": n, "containerEdits": {"env": [f"N={n}"]}} for n in names]}))
    return path


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_validate_valid_files(tmp_path, capsys):
    a = write_spec(tmp_path / "a.json")
    b = tmp_path / "b.yaml"
    b.write_text('cdiVersion: 0.5.0\nkind: x.com/y\ndevices:\n- name: 1:0\n  containerEdits: {env: [A=1]}\n')
    code, out, err = run(capsys, "cdi", "validate", str(a), str(b))
    assert code == 0 and err == ""
    assert f"{a}: valid" in out and f"{b}: valid" in out


def test_validate_reports_every_problem_and_fails(tmp_path, capsys):
    good = write_spec(tmp_path / "good.json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"cdiVersion": "0.3.0", "kind": "x", "devices": [{"name": "a b", "containerEdits": {}}],
                               "extra": True}))
    broken = tmp_path / "broken.yaml"
    broken.write_text("devices: [\n")
    code, out, err = run(capsys, "cdi", "validate", str(good), str(bad), str(broken), str(tmp_path / "missing.json"))
    assert code == 1
    lines = err.splitlines()
    assert all(line.startswith("nvidia-ctk: error: ") for line in lines)
    assert sum(f"({bad})" in line for line in lines) == 4   # extra, kind, name, empty edits
    assert any(f"({broken}" in line and "invalid YAML" in line for line in lines)
    assert any("missing.json" in line and "No such file" in line for line in lines)
    assert f"{good}: valid" in out
    assert "Traceback" not in err


def test_validate_needs_a_file(capsys):
    code, _, err = run(capsys, "cdi", "validate")
    assert code == 2
    assert err == "nvidia-ctk: error: missing argument 'FILES...' (see nvidia-ctk cdi validate --help)\n"


def test_list_with_spec_dirs(tmp_path, capsys):
    low, high = tmp_path / "low", tmp_path / "high"
    low.mkdir()
    high.mkdir()
    write_spec(low / "a.json", names=("0", "1"))
    write_spec(high / "b.json", names=("1",))
    write_spec(low / "c.json", kind="other.com/k", names=("x",))
    write_spec(low / "d.json", kind="other.com/k", names=("x",))   # conflict with c.json
    (low / "e.json").write_text("{")
    code, out, err = run(capsys, "cdi", "list", "--spec-dir", str(low), "--spec-dir", str(high))
    assert code == 0
    assert out.splitlines() == [f"vendor.example/cls=0\t{low / 'a.json'}", f"vendor.example/cls=1\t{high / 'b.json'}"]
    assert "conflict" in err and "other.com/k=x" in err
    assert "e.json" in err and "Traceback" not in err


def test_list_uses_config_spec_dirs(tmp_path, capsys, monkeypatch):
    specs = tmp_path / "specs"
    specs.mkdir()
    write_spec(specs / "a.json")
    config = tmp_path / "config.toml"
    config.write_text(f'[nvidia-container-runtime.modes.cdi]\nspec-dirs = ["{specs}"]\n')
    monkeypatch.setenv("NVIDIA_CTK_CONFIG_FILE_PATH", str(config))
    code, out, _ = run(capsys, "cdi", "list")
    assert code == 0 and out == f"vendor.example/cls=dev0\t{specs / 'a.json'}\n"
    config.write_text("[broken")
    code, _, err = run(capsys, "cdi", "list")
    assert code == 1 and err.startswith("nvidia-ctk: error: invalid TOML") and f"({config})" in err


def test_group_is_extensible():
    from ctk import cdi_cmd

    assert set(cdi_cmd.SUBCOMMANDS) >= {"validate", "list"}
    assert all(":" in target for target in cdi_cmd.SUBCOMMANDS.values())


def test_a_lone_surrogate_makes_a_spec_invalid_in_json_and_yaml(tmp_path, capsys):
    """A string escape that makes a lone surrogate ("\\ud800") cannot be written as UTF-8: the spec is
    refused, by validate and by list (and so by every program reading spec dirs); a pair is a character."""
    head = '{"cdiVersion": "0.5.0", "kind": "%s", "devices": [{"name": "x", "containerEdits": {"env": ["%s"]}}]}'
    (tmp_path / "lone.json").write_text(head % ("a.example/j", "A=\\ud800"))
    (tmp_path / "lone.yaml").write_text('cdiVersion: 0.5.0\nkind: a.example/y\ndevices:\n- name: "x"\n'
                                        '  containerEdits: {env: ["A=\\U0000DC00"]}\n')
    (tmp_path / "pair.json").write_text(head % ("a.example/p", "A=\\ud83d\\ude00 \\u00e9"))
    lone = [tmp_path / "lone.json", tmp_path / "lone.yaml"]
    code, out, err = run(capsys, "cdi", "validate", *map(str, lone), str(tmp_path / "pair.json"))
    assert code == 1 and out == f"{tmp_path / 'pair.json'}: valid CDI spec (cdiVersion 0.5.0, kind a.example/p, 1 device)\n"
    assert err == "".join(f"nvidia-ctk: error: $: invalid spec: a string holds a lone surrogate [parse] ({p})\n"
                          for p in lone)
    code, out, err = run(capsys, "cdi", "list", "--spec-dir", str(tmp_path))
    assert code == 0 and out == f"a.example/p=x\t{tmp_path / 'pair.json'}\n"
    assert err.count("lone surrogate") == 2

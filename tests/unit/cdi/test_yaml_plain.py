"""cdi.yaml_plain writes a spec document as the very bytes PyYAML (cdi.spec_yaml) writes, or steps aside:
never a different text. (tests/unit/cdi_generate/test_generate_cli.py checks it on generated specs.)"""
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdi.spec_yaml import dump_yaml_document
from cdi.yaml_plain import dump_plain_yaml

# what YAML 1.1 reads as something else, what needs quoting, and what a spec really holds
WORDS = ["", "a", "y", "n", "Y", "N", "yes", "No", "ON", "off", "true", "False", "null", "Null", "~", "0", "1", "-1",
         "+1", "0x1f", "0o17", "0b101", "017", "1_000", "1:0", "1:30:00", "190:20:30", "1.5", ".5", "1e5", "1.0e+5",
         ".inf", "-.Inf", ".nan", "2001-12-14", "2001-12-14t21:59:43.10-05:00", "0.5.0", "550.54.15", "1.2.3.4",
         "1..2", "...", "---", "---x", ".../a", "--link", "-", "-x", "=", "=x", "<<", "a:", ":a", "a:b", "a::/b", "a: b", "a #b",
         "#a", "@a", "a@b", "%a", "!a", "&a", "*a", "|", ">", "'a'", '"a"', "a,b", "[a]", "{a}", "?a", "? a",
         "a b", " a", "a ", "a\tb", "a\nb", "é", "\x00", "/dev/nvidia0", "../lib.so.1", "/usr/lib/x86_64-linux-gnu",
         "NVIDIA_VISIBLE_DEVICES=void", "nosuid", "nodev", "ro", "bind", "nvidia-cdi-hook", "create-symlinks",
         "libcuda.so.1::/usr/lib/libcuda.so", "GPU-a737b52a-9014-5473-88a0-a9ee4fe80c1c", "MIG-1", "all", "0:0",
         "x" * 129, "/" + "x" * 5000, "k=" + "v" * 5000]
texts = st.one_of(st.sampled_from(WORDS), st.text(alphabet="ab01.:/-_=+ yYnNoO#\"'", max_size=8), st.text(max_size=6))
keys = st.one_of(st.sampled_from(["name", "devices", "env", "path", "major", "containerEdits", "x" * 129]), texts)
scalars = st.one_of(texts, st.integers(-5, 5), st.integers(), st.booleans(), st.none(), st.floats(allow_nan=False))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
                      max_leaves=10)
documents = st.dictionaries(keys, values, max_size=4)


@settings(max_examples=2000, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(documents)
def test_fuzzed_documents_get_pyyamls_text_or_none(document):
    text = dump_plain_yaml(document)
    assert text is None or text == dump_yaml_document(document)


@pytest.mark.parametrize("word", WORDS)
def test_each_word_is_written_as_pyyaml_writes_it_or_left_to_pyyaml(word):
    for document in ({"k": word}, {"k": [word]}, {word: 1}, {"name": word}, {"l": [{"name": word, "k": word}]}):
        text = dump_plain_yaml(document)
        assert text is None or text == dump_yaml_document(document), document
    text = dump_plain_yaml({"k": word})
    assert text is None or yaml.safe_load(text) == {"k": word}   # a YAML 1.1 reader gets the same string


def test_a_spec_like_document_is_written_here():
    document = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
                "devices": [{"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0", "major": 195,
                                                                              "minor": 0}]}},
                            {"name": "1:0", "containerEdits": {"env": ["A=1"]}}],
                "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=void"],
                                   "mounts": [{"hostPath": "/l.so", "containerPath": "/l.so",
                                               "options": ["ro", "nosuid", "nodev", "bind"]}],
                                   "hooks": [{"hookName": "createContainer", "path": "/h",
                                              "args": ["h", "--link", "550.54.15", "../a.so::/b/c.so"],
                                              "env": ["PATH=/usr/bin"]}],
                                   "intelRdt": {"enableCMT": True}, "additionalGids": [44]}}
    text = dump_plain_yaml(document)
    assert text is not None and text == dump_yaml_document(document)
    assert yaml.safe_load(text)["devices"][1]["name"] == "1:0"


@pytest.mark.parametrize("document", [{}, {"k": []}, {"k": {}}, {"k": [[1]]}, {"k": None}, {"k": 1.5},
                                      {1: "a"}, {"k": "on"}, {"k": "1:0"}, {"k": "a b"}])
def test_what_it_cannot_be_sure_of_is_left_to_pyyaml(document):
    assert dump_plain_yaml(document) is None

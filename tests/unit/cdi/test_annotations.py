import pytest

from cdi.annotations import annotation_key, annotation_value, devices_from_annotations
from cdi.errors import InvalidNameError, RequestError


def test_key_and_value_for_a_device_plugin():
    key = annotation_key("nvidia-device-plugin", "pod-1")
    assert key == "cdi.k8s.io/nvidia-device-plugin_pod-1"
    value = annotation_value(["nvidia.com/gpu=0", "nvidia.com/gpu=1:0"])
    assert devices_from_annotations({key: value}) == ("nvidia.com/gpu=0", "nvidia.com/gpu=1:0")


@pytest.mark.parametrize("plugin, device_id", [("p" * 60, "long-id"), ("bad plugin", "0"), ("p", "a/b"), ("p", "-")])
def test_bad_keys(plugin, device_id):
    with pytest.raises(InvalidNameError):
        annotation_key(plugin, device_id)


def test_bad_values():
    with pytest.raises(InvalidNameError):
        annotation_value(["nvidia.com/gpu"])
    with pytest.raises(RequestError, match="must be a string"):
        devices_from_annotations({"cdi.k8s.io/x": ["nvidia.com/gpu=0"]})


def test_other_annotations_and_empty_items_are_ignored():
    annotations = {"io.kubernetes.x": "nvidia.com/gpu=9", "cdi.k8s.io/a": " , nvidia.com/gpu=0,", 7: "x"}
    assert devices_from_annotations(annotations) == ("nvidia.com/gpu=0",)

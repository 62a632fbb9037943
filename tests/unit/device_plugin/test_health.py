"""Which XIDs change a device's health, and DP_DISABLE_HEALTHCHECKS, as NVIDIA's plugin reads them."""
from device_plugin.health import APPLICATION_XIDS, DeviceHealth, HealthWatcher, XidEvent, ignored_xids


def test_disable_healthchecks():
    assert ignored_xids({}) == APPLICATION_XIDS == {13, 31, 43, 45, 68, 109}
    assert ignored_xids({"DP_DISABLE_HEALTHCHECKS": "all"}) is None
    assert ignored_xids({"DP_DISABLE_HEALTHCHECKS": "xids"}) is None
    assert ignored_xids({"DP_DISABLE_HEALTHCHECKS": "48, 63"}) == APPLICATION_XIDS | {48, 63}


def test_only_critical_xids_mark_devices():
    health = DeviceHealth()
    watcher = HealthWatcher(source=None, health=health, devices_of=lambda gpu: [gpu, f"MIG-of-{gpu}"],
                            ignored=ignored_xids({}))
    assert not watcher.handle(XidEvent("GPU-a", 43))
    assert watcher.handle(XidEvent("GPU-a", 48))
    assert (health.health("GPU-a"), health.health("MIG-of-GPU-a"), health.health("GPU-b")) == \
        ("Unhealthy", "Unhealthy", "Healthy")
    assert not watcher.handle(XidEvent("GPU-a", 48))   # no change: no update sent again

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


def test_a_mig_xid_marks_that_mig_device_and_a_recovered_gpu_comes_back():
    from device_plugin.health import GpuLost, GpuRecovered

    health = DeviceHealth()
    migs = {("GPU-a", 3, 0): "MIG-a3", ("GPU-a", 4, 0): "MIG-a4"}
    watcher = HealthWatcher(source=None, health=health, devices_of=lambda gpu: [gpu, "MIG-a3", "MIG-a4"],
                            ignored=ignored_xids({"DP_DISABLE_HEALTHCHECKS": "79"}),
                            mig_of=lambda gpu, gi, ci: migs.get((gpu, gi, ci)))
    assert watcher.handle(XidEvent("GPU-a", 94, gi=4, ci=0))
    assert [health.health(u) for u in ("GPU-a", "MIG-a3", "MIG-a4")] == ["Healthy", "Healthy", "Unhealthy"]
    assert not watcher.handle(XidEvent("GPU-a", 94, gi=9, ci=0))   # not a MIG device served here
    assert not watcher.handle(XidEvent("GPU-a", 79))                # ignored by DP_DISABLE_HEALTHCHECKS
    assert watcher.handle(GpuLost("GPU-a"))                         # whatever the ignored XIDs
    assert [health.health(u) for u in ("GPU-a", "MIG-a3", "MIG-a4")] == ["Unhealthy"] * 3
    assert watcher.handle(GpuRecovered("GPU-a"))
    assert [health.health(u) for u in ("GPU-a", "MIG-a3", "MIG-a4")] == ["Healthy"] * 3


def test_a_lost_gpu_is_watched_until_it_answers_even_by_the_next_watcher():
    class Source:
        def __init__(self):
            self.lost = {"GPU-a"}

        def answers(self, gpu):
            return gpu not in self.lost

    health, source, lost = DeviceHealth(), Source(), set()
    first = HealthWatcher(source, health, devices_of=lambda gpu: [gpu], ignored=ignored_xids({}), lost=lost)
    assert first.handle(XidEvent("GPU-a", 79)) and first.handle(XidEvent("GPU-b", 48))
    assert lost == {"GPU-a"}                             # GPU-b still answers: it is not watched
    second = HealthWatcher(source, health, devices_of=lambda gpu: [gpu], ignored=ignored_xids({}), lost=lost)
    second.recover()
    assert health.health("GPU-a") == "Unhealthy"
    source.lost.clear()                                  # reset
    second.recover()
    assert (health.health("GPU-a"), health.health("GPU-b"), lost) == ("Healthy", "Unhealthy", set())

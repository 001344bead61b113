"""The rehearsal's background stand-ins (the Provisioner's volumes, the HookRunner's hook pods) share one loop
(gpu_platform/rehearsal/kube.py PollingLoop): a pass that meets an API error or a refused connection is retried at
the next, and stop() ends the thread."""

from __future__ import annotations

import threading

from gpu_platform.rehearsal.hooks import HookRunner
from gpu_platform.rehearsal.kube import ApiError, PollingLoop, UnknownKind
from gpu_platform.rehearsal.volumes import Provisioner


class Flaky(PollingLoop):
    name = "test-loop"

    def __init__(self):
        super().__init__(client=None, interval=0.01)  # type: ignore[arg-type]
        self.passes = 0
        self.third = threading.Event()

    def once(self) -> None:
        self.passes += 1
        if self.passes == 1:
            raise ApiError(500, "etcd leader changed")
        if self.passes == 2:
            raise ConnectionRefusedError("the API server restarts")
        if self.passes == 3:
            raise UnknownKind("a CRD not served yet")
        self.third.set()


def test_a_failed_pass_is_retried_and_stop_ends_the_thread():
    loop = Flaky().start()
    assert loop.third.wait(5), f"the loop stopped after {loop.passes} passes"
    loop.stop()
    assert not loop._thread.is_alive() and loop._thread.name == "test-loop"


def test_the_provisioner_and_the_hook_runner_are_such_loops():
    for cls, name in ((Provisioner, "rehearsal-provisioner"), (HookRunner, "rehearsal-hook-runner")):
        loop = cls(client=None, interval=0.01)  # type: ignore[arg-type]
        assert isinstance(loop, PollingLoop) and loop._thread.name == name

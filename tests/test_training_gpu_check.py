"""The example training program's GPU check (issue 34 item 1), as pure functions: what shows a
container was given GPUs, and which device it then trains on. The end-to-end refusal (exit code,
message) is in tests/test_training_e2e.py; these need no torch."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TRAINING_DIR = Path(__file__).resolve().parents[1] / "examples" / "training"
sys.path.insert(0, str(TRAINING_DIR))
from ckpt_train.__main__ import GpuUnavailable, choose_device, gpus_given  # noqa: E402

sys.path.remove(str(TRAINING_DIR))


def test_gke_device_nodes_count_as_given_gpus(tmp_path):
    """GKE's device plugin sets no NVIDIA_VISIBLE_DEVICES: the allocated GPU shows as /dev/nvidia<N>."""
    for name in ("nvidia0", "nvidiactl", "nvidia-uvm", "null"):
        (tmp_path / name).touch()
    assert gpus_given({}, str(tmp_path)) == [str(tmp_path / "nvidia0")]
    assert gpus_given({}, str(tmp_path / "absent")) == []


@pytest.mark.parametrize("value,given", [("GPU-1234", True), ("0,1", True), ("all", True),
                                         ("/var/run/nvidia-container-devices", True),
                                         ("void", False), ("none", False), ("", False), (None, False)])
def test_nvidia_visible_devices(tmp_path, value, given):
    env = {} if value is None else {"NVIDIA_VISIBLE_DEVICES": value}
    assert bool(gpus_given(env, str(tmp_path))) is given


def test_choose_device():
    assert choose_device("auto", True, ["/dev/nvidia0"], {}) == "cuda"
    assert choose_device("auto", False, [], {}) == "cpu"
    assert choose_device("cpu", False, ["/dev/nvidia0"], {}) == "cpu"
    assert choose_device("cuda", True, [], {}) == "cuda"
    with pytest.raises(GpuUnavailable, match=r"given GPUs \(/dev/nvidia0\).*LD_LIBRARY_PATH=''"):
        choose_device("auto", False, ["/dev/nvidia0"], {})
    with pytest.raises(GpuUnavailable, match="--device cuda"):
        choose_device("cuda", False, [], {"LD_LIBRARY_PATH": "/x"})

"""Node allocatable per cloud (gpu_platform/components/capacity.py), against values computed by hand from each
cloud's documented formula (see the module docstring for the sources)."""

from __future__ import annotations

import pytest

from gpu_platform.components import capacity
from gpu_platform.components.capacity import MI, Allocatable, CapacityError, allocatable, cpu_millis, memory_bytes, parse_quantity


def _mib(a: Allocatable) -> float:
    return a.memory_bytes / MI


def test_gke_e2_standard_4():
    # 4 vCPU: 60 + 10 + 2 x 5 = 80m reserved. 16 GiB: 25 % x 4 + 20 % x 4 + 10 % x 8 = 2.6 GiB
    # = 2662.4 MiB reserved, 100 MiB eviction: 16384 - 2662.4 - 100 = 13621.6 MiB.
    a = allocatable("gcp", "e2-standard-4")
    assert a.cpu_millis == 3920
    assert _mib(a) == pytest.approx(13621.6, abs=0.01)
    assert (a.gpus, a.pods) == (0, 110)


def test_gke_a2_highgpu_1g():
    # 12 vCPU: 80m + 0.25 % x 8000m = 100m. 85 GiB: 2.6 GiB + 6 % x 69 GiB (4.14) = 6.74 GiB reserved:
    # (85 - 6.74) x 1024 - 100 = 80038.24 MiB.
    a = allocatable("gcp", "a2-highgpu-1g")
    assert a.cpu_millis == 11900
    assert _mib(a) == pytest.approx(80038.24, abs=0.01)
    assert a.gpus == 1


def test_gke_memory_above_128_gib_and_under_1_gib():
    # 170 GiB: 2.6 + 6 % x 112 (6.72) + 2 % x 42 (0.84) = 10.16 GiB
    assert capacity.gke_memory_reserved_bytes(170 * capacity.GI) / capacity.GI == pytest.approx(10.16, abs=1e-6)
    assert capacity.gke_memory_reserved_bytes(512 * MI) == 255 * MI


def test_eks_g5_xlarge_gpu_asg():
    # self-managed (nodeadm): 4 ENIs x (15 - 1) + 2 = 58 pods; kube-reserved 11 x 58 + 255 = 893 MiB,
    # eviction 100 MiB: 16384 - 993 = 15391 MiB; CPU 4000 - 80 = 3920m. A 4 CPU / 16 GiB pod cannot fit.
    a = allocatable("aws", "g5.xlarge")
    assert (a.cpu_millis, _mib(a), a.gpus, a.pods) == (3920, 15391, 1, 58)
    assert a.cpu_millis < 4000 and a.memory_bytes < 16 * capacity.GI


def test_eks_g5_12xlarge_self_managed_vs_managed_cap():
    # 15 ENIs x 49 + 2 = 737 pods uncapped -> 11 x 737 + 255 = 8362 MiB; 196608 - 8462 = 188146 MiB.
    # 48 vCPU: 80m + 0.25 % x 44000m = 190m.
    a = allocatable("aws", "g5.12xlarge")
    assert (a.cpu_millis, _mib(a), a.pods) == (47810, 188146, 737)
    # a managed node group caps maxPods at 250 above 30 vCPUs: 11 x 250 + 255 = 3005 MiB -> 193503 MiB
    m = allocatable("aws", "g5.12xlarge", managed_node_group=True)
    assert (_mib(m), m.pods) == (193503, 250)


def test_eks_m6i_xlarge_system_node_group():
    a = allocatable("aws", "m6i.xlarge", managed_node_group=True)
    assert (a.cpu_millis, _mib(a), a.pods) == (3920, 15391, 58)


def test_every_catalog_aws_type_has_eni_data():
    from gpu_platform.costs.catalog import load_catalog

    for t in load_catalog().instances("aws"):
        assert allocatable("aws", t.name).pods > 0


def test_linode_without_reservations_is_capacity_minus_default_eviction(monkeypatch):
    from gpu_platform.data import linode_kubelet

    for name in ("KUBE_RESERVED", "SYSTEM_RESERVED", "EVICTION_HARD", "MAX_PODS"):
        monkeypatch.delattr(linode_kubelet, name, raising=False)
    a = allocatable("linode", "g6-standard-4")
    assert (a.cpu_millis, _mib(a), a.gpus, a.pods) == (4000, 8192 - 100, 0, 110)


def test_linode_reads_the_kubelet_reservations_from_the_linode_kubelet_data(monkeypatch):
    from gpu_platform.data import linode_kubelet

    monkeypatch.setattr(linode_kubelet, "KUBE_RESERVED", {"cpu": "100m", "memory": "512Mi"}, raising=False)
    monkeypatch.setattr(linode_kubelet, "SYSTEM_RESERVED", {"cpu": "0.1", "memory": "256Mi"}, raising=False)
    monkeypatch.setattr(linode_kubelet, "EVICTION_HARD", {"memory.available": "200Mi", "nodefs.available": "10%"}, raising=False)
    monkeypatch.setattr(linode_kubelet, "MAX_PODS", 80, raising=False)
    a = allocatable("linode", "g1-gpu-rtx6000-1")  # 8 vCPU, 32 GiB, 1 GPU
    assert (a.cpu_millis, _mib(a), a.gpus, a.pods) == (7800, 32768 - 512 - 256 - 200, 1, 80)
    # evictionHard set without memory.available: the kubelet has no memory threshold
    monkeypatch.setattr(linode_kubelet, "EVICTION_HARD", {"nodefs.available": "10%"}, raising=False)
    assert _mib(allocatable("linode", "g1-gpu-rtx6000-1")) == 32768 - 512 - 256


def test_linode_reservations_match_the_rendered_kubelet_configuration():
    """One source of truth: what capacity subtracts is what the KubeletConfiguration really sets."""
    from gpu_platform.components.linode import render

    kube, system, eviction, max_pods = capacity.linode_kubelet_reservations()
    rendered = render._kubelet_configuration()
    assert rendered.get("kubeReserved", {}) == kube
    assert rendered.get("systemReserved", {}) == system
    assert rendered.get("evictionHard") == eviction
    assert rendered.get("maxPods", capacity.KUBELET_DEFAULT_MAX_PODS) == max_pods


def test_unknown_instance_type_and_cloud():
    with pytest.raises(CapacityError, match="not in the price catalog"):
        allocatable("gcp", "n1-nonexistent")
    with pytest.raises(CapacityError):
        capacity.eks_max_pods("x9.huge", 4, False)


@pytest.mark.parametrize("text, value", [
    ("500m", "0.5"), ("2", "2"), ("1.5Gi", str(1.5 * 1024 ** 3)), ("1k", "1000"), ("1e3", "1000"), ("100Mi", str(100 * MI)),
    (3, "3"), ("250n", "0.00000025"),
])
def test_parse_quantity(text, value):
    assert float(parse_quantity(text)) == pytest.approx(float(value))


def test_cpu_and_memory_helpers_round_up():
    assert cpu_millis("0.0001") == 1 and cpu_millis("1.5") == 1500 and cpu_millis(2) == 2000
    assert memory_bytes("1Ki") == 1024 and memory_bytes("1.5") == 2
    with pytest.raises(ValueError):
        parse_quantity("ten")

"""`python -m gpu_platform.costs seed-check`: the estimator's figures next to the seed story's, each gap explained.

Seed 000 (Ntropy, 23 Jan 2022) says: Linode RTX 6000 "just over $1000 / GPU per month", and
"8xA100 nodes $70,000 / yr" on GCP preemptible A100 at "$0.88 / GPU / hour".
"""

from __future__ import annotations

from gpu_platform.costs.catalog import HOURS_PER_MONTH, load_catalog, load_override_set
from gpu_platform.costs.estimator import PoolShape, StackShape, estimate

SEED_LINODE_PER_GPU_MONTH = 1000.0
SEED_A100_PER_GPU_HOUR = 0.88
SEED_8XA100_PER_YEAR = 70000.0
HOURS_PER_YEAR = 8760.0


def _money(x: float) -> str:
    return f"${x:,.0f}"


def seed_check() -> str:
    overrides = load_override_set("seed-era-2022")
    seed_cat = load_catalog(overrides)
    now_cat = load_catalog()
    out = ["Seed check: the estimator with the seed-era price set (gpu_platform/costs/catalog/seed-era-2022.yaml) "
           "against the seed's figures (seed 000, Ntropy, 2022-01-23).", ""]

    # 1. one Linode RTX 6000 GPU for a month
    one = estimate(StackShape("linode", "us-east", (PoolShape("rtx6000", "g1-gpu-rtx6000-1", "on-demand", 1, 1),),
                              name="one-rtx6000"), seed_cat)
    t = seed_cat.instance("linode", "g1-gpu-rtx6000-1")
    gpu_line = one.lines[0]
    cluster = estimate(StackShape("linode", "us-east", (PoolShape("rtx6000", "g1-gpu-rtx6000-3", "on-demand", 5, 5),),
                                  control_plane_type="g6-standard-4", control_plane_count=1, name="seed-cluster"), seed_cat)
    per_gpu_cluster = cluster.full_monthly_usd / cluster.full_gpus
    out += [
        "1) One Linode RTX 6000 GPU for a month",
        f"   estimator : {_money(gpu_line.monthly_usd)} per GPU-month (g1-gpu-rtx6000-1, {t.on_demand.usd_per_hour:.2f} $/h)",
        f"   seed      : 'just over {_money(SEED_LINODE_PER_GPU_MONTH)} / GPU per month'",
        f"   difference: {_money(gpu_line.monthly_usd - SEED_LINODE_PER_GPU_MONTH)}. The hourly rate gives "
        f"{t.on_demand.usd_per_hour:.2f} x {HOURS_PER_MONTH:.0f} h = {_money(t.on_demand.usd_per_hour * HOURS_PER_MONTH)}, "
        f"but Linode bills at most {_money(t.monthly_cap_usd or 0)} per GPU-month (monthly cap), which the estimator applies.",
        f"   'just over': a kubeadm cluster also pays its control plane. The seed-like cluster (5 x g1-gpu-rtx6000-3 + one "
        f"g6-standard-4) costs {_money(cluster.full_monthly_usd)} for {cluster.full_gpus} GPUs = "
        f"{_money(per_gpu_cluster)} per GPU-month ({_money(per_gpu_cluster - SEED_LINODE_PER_GPU_MONTH)} above $1,000; "
        f"the control plane is priced at today's catalog rate).",
        "",
    ]

    # 2. eight preemptible A100 GPUs for a year
    machine = estimate(StackShape("gcp", "us-central1", (PoolShape("a100", "a2-highgpu-8g", "preemptible", 1, 1),),
                                  system_nodes=(), nat_gateways=0, managed_control_plane=False, name="8xA100"), seed_cat)
    gke = estimate(StackShape("gcp", "us-central1", (PoolShape("a100", "a2-highgpu-8g", "preemptible", 1, 1),),
                              name="8xA100-gke"), seed_cat)
    now = estimate(StackShape("gcp", "us-central1", (PoolShape("a100", "a2-highgpu-8g", "preemptible", 1, 1),),
                              system_nodes=(), nat_gateways=0, managed_control_plane=False, name="8xA100-now"), now_cat)
    year = HOURS_PER_YEAR / HOURS_PER_MONTH
    gpu_now = now_cat.gpu_only_price("gcp", "nvidia-tesla-a100", "preemptible")
    gpu_only = SEED_A100_PER_GPU_HOUR * 8 * HOURS_PER_YEAR
    machine_year = machine.full_monthly_usd * year
    host_year = machine_year - gpu_only
    gke_year = gke.full_monthly_usd * year
    rate8 = seed_cat.instance("gcp", "a2-highgpu-8g").preemptible.usd_per_hour
    out += [
        "2) Eight preemptible A100 GPUs for a year (one a2-highgpu-8g, 24 x 365 h)",
        f"   estimator : {_money(machine_year)} per year for the machine ({rate8:.4f} $/h x {HOURS_PER_YEAR:.0f} h); "
        f"{_money(gke_year)} with the GKE fee, a system node and Cloud NAT",
        f"   seed      : '8xA100 nodes {_money(SEED_8XA100_PER_YEAR)} / yr' at '{SEED_A100_PER_GPU_HOUR} $ / GPU / hour'",
        f"   difference: {_money(machine_year - SEED_8XA100_PER_YEAR)}. The seed's GPU price alone gives "
        f"{SEED_A100_PER_GPU_HOUR} x 8 x {HOURS_PER_YEAR:.0f} = {_money(gpu_only)}; the A2 host's 96 vCPU and 680 GiB "
        f"add {_money(host_year)} (ESTIMATED at 2022 preemptible rates), so the seed's $70k sits between the GPU-only "
        f"figure ({_money(gpu_only)}) and the whole machine ({_money(machine_year)}): a rounded GPU-plus-part-of-host number.",
        f"   at today's catalog prices (Spot = preemptible, {now.lines[0].unit_usd_per_hour:.4f} $/h) the same machine costs "
        f"{_money(now.full_monthly_usd * year)} per year.",
        f"   the A100 GPU alone, preemptible/Spot, today: ${gpu_now.usd_per_hour:.4f}/GPU-hour = "
        f"{gpu_now.usd_per_hour / SEED_A100_PER_GPU_HOUR:.2f}x the seed's ${SEED_A100_PER_GPU_HOUR}"
        f" ({gpu_now.status}: {gpu_now.source}).",
        "",
        "Sources: every price above carries its source and date in gpu_platform/costs/catalog/*.yaml; run "
        "`python -m gpu_platform.costs simulate examples/seed-scenario.yaml` for the 8x story as a simulated month.",
    ]
    return "\n".join(out)


__all__ = ["seed_check", "SEED_8XA100_PER_YEAR", "SEED_A100_PER_GPU_HOUR", "SEED_LINODE_PER_GPU_MONTH"]

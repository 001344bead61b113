"""`python -m gpu_platform.costs seed-check`: the estimator next to the seed's figures, every gap explained."""

from __future__ import annotations

import re

from gpu_platform.costs.__main__ import main
from gpu_platform.costs.seedcheck import seed_check


def test_seed_check_prints_both_figures_and_explains_the_gaps(capsys):
    assert main(["seed-check"]) == 0
    out = capsys.readouterr().out
    assert out.strip() == seed_check().strip()
    # 1) Linode: $1,000 per GPU-month (cap) next to the seed's "just over $1000", the hourly arithmetic shown
    assert "estimator : $1,000 per GPU-month" in out
    assert "just over $1,000 / GPU per month" in out
    assert "1.50 x 730 h = $1,095" in out and "monthly cap" in out
    m = re.search(r"costs \$15,048 for 15 GPUs = \$1,003 per GPU-month", out)
    assert m, out
    # 2) 8 x A100 preemptible for a year: GPU-only 0.88 x 8 x 8760 and the host part, next to $70,000
    assert "8xA100 nodes $70,000 / yr" in out
    assert "0.88 x 8 x 8760 = $61,670" in out
    assert "estimator : $77,207 per year for the machine" in out
    assert "ESTIMATED" in out and "between the GPU-only" in out
    assert "at today's catalog prices" in out


def test_seed_check_states_todays_a100_gpu_only_price_against_the_seeds():
    from gpu_platform.costs.seedcheck import seed_check

    out = seed_check()
    # $1.92802 machine - (12 x 0.01264 + 85 x 0.001695) host = $1.632265 per GPU-hour = 1.85 x $0.88
    assert "the A100 GPU alone, preemptible/Spot, today: $1.6323/GPU-hour = 1.85x the seed's $0.88" in out
    assert "derived" in out and "cloud.google.com/spot-vms/pricing" in out

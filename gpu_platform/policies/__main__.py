"""Builds the gpu-platform policy pack; `pulumi preview --policy-pack gpu_platform/policies` (or preflight) runs it.

The pack reads the project's price catalog and estimator (gpu_platform/costs/), so the repository root goes on
sys.path first: the CLI starts packs with the pack directory as the program, preflight with
`python -m pulumi.policy <engine> gpu_platform/policies` from the repository root.
"""

import gc
import os
import sys
import threading

# The pack holds pulumi's, grpc's and the pack's modules (hundreds of thousands of objects) for its whole life: with
# CPython's default thresholds the collector walked them again and again for cycles that are never garbage (0.14 of
# aws-prod's 1.6 CPU-seconds in the pack). Fewer collections, as preflight's command does (preflight/__main__.py cli).
gc.set_threshold(100_000, 50, 50)

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from pulumi_policy import PolicyPack  # noqa: E402

from gpu_platform.policies import (budget_rules, cost_rules, hygiene_rules, locks, pools, running,  # noqa: E402
                                   security_rules, stack_settings)


def _read_ahead() -> None:
    pools.read_catalog_ahead()
    stack_settings.read_settings_ahead()


# The price catalog and the stack's settings are read while the pack waits for its first call, not in the stack
# analysis, the last step of a preflight (pools.read_catalog_ahead, stack_settings.read_settings_ahead).
threading.Thread(target=_read_ahead, name="read-ahead", daemon=True).start()

# locks.install: the pack itself refuses a policy config that lowers or loosens a mandatory policy without a
# valid exception (and a locked one without an entry in gpu_platform/policies/enforcement.yaml), so
# `pulumi preview --policy-pack-config` cannot either.
# locks.with_exceptions: every mandatory policy takes an `exception` {reason, approver, until}, the only way
# a stack's policy config may lower it or raise its ceilings.
locks.with_exceptions(cost_rules.POLICIES + security_rules.POLICIES + hygiene_rules.POLICIES + budget_rules.POLICIES)
locks.install(cost_rules.POLICIES + security_rules.POLICIES + hygiene_rules.POLICIES + budget_rules.POLICIES)

PolicyPack(
    name="gpu-platform-guardrails",
    description="GPU cost ceilings and security guardrails for gpu-platform stacks.",
    # running.track: preflight can name the policy a hung Analyze call is stuck in.
    policies=running.track(cost_rules.POLICIES + security_rules.POLICIES + hygiene_rules.POLICIES
                            + budget_rules.POLICIES),
)

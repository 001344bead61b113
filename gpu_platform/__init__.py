"""gpu-platform: Pulumi components for a cost-controlled GPU training platform (Linode kubeadm, GKE,
EKS) with the same ML platform on every cluster, a CrossGuard policy pack, a cost model and an
offline preflight.

Subpackages: `components` (clusters per cloud, the ML platform, the typed config), `costs`
(catalog, estimator, simulator), `policies` (the policy pack), `preflight` (offline plan, policy,
cluster fit and cost), `controllers` (the scale-in protection controller's image source).
"""

# The release; CHANGELOG.md has a section and git a `v<version>` tag for each.
__version__ = "0.2.0"


def command_name(module: str) -> str:
    """How the user started a command, for usage lines: the console script's name
    (`gpu-platform-preflight`) or `python -m <module>`."""
    import os
    import sys

    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return script if script.startswith("gpu-platform-") else f"python -m {module}"

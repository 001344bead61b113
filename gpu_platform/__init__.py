"""gpu-platform: Pulumi components for a cost-controlled GPU training platform (Linode kubeadm, GKE,
EKS) with the same ML platform on every cluster, a CrossGuard policy pack, a cost model and an
offline preflight.

Subpackages: `components` (clusters per cloud, the ML platform, the typed config), `costs`
(catalog, estimator, simulator), `policies` (the policy pack), `preflight` (offline plan, policy,
cluster fit and cost), `controllers` (the scale-in protection controller's image source).
"""

# The package's version (PEP 440), set here and nowhere else: pyproject.toml reads it, the wheel's name
# carries it, the policy pack's manifest restates it (the Pulumi CLI reads a pack's version from
# PulumiPolicy.yaml; tests/test_package.py keeps the two equal) and .github/workflows/release.yml refuses a
# tag that is not `v` + this (tools/release.py). While CHANGELOG.md has an [Unreleased] section it is the next
# release's `.dev0`, so a wheel built between releases never claims to be the last one (docs/architecture.md,
# Releasing). 0.1.0 and 0.2.0 were never tagged; 0.3.0 was the first release to pin; pin the newest, `@v0.3.1`.
__version__ = "0.3.2.dev0"


def command_name(module: str) -> str:
    """How the user started a command, for usage lines: the console script's name
    (`gpu-platform-preflight`) or `python -m <module>`."""
    import os
    import sys

    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return script if script.startswith("gpu-platform-") else f"python -m {module}"

"""gpu-platform: Pulumi components for a cost-controlled GPU training platform (Linode kubeadm, GKE,
EKS) with the same ML platform on every cluster, a CrossGuard policy pack, a cost model and an
offline preflight.

Subpackages: `components` (clusters per cloud, the ML platform, the typed config), `costs`
(catalog, estimator, simulator), `policies` (the policy pack), `preflight` (offline plan, policy,
cluster fit and cost), `controllers` (the scale-in protection controller's image source).
"""

# The package's version (PEP 440). While CHANGELOG.md has an [Unreleased] section it is the next release's
# `.dev0`, so a wheel built between releases never claims to be the last one; a release sets X.Y.Z, names
# the section after it and tags `vX.Y.Z` (docs/architecture.md, Releasing). No release is tagged yet:
# 0.1.0 and 0.2.0 have CHANGELOG sections but no tags, so programs pin a commit.
__version__ = "0.3.0.dev0"


def command_name(module: str) -> str:
    """How the user started a command, for usage lines: the console script's name
    (`gpu-platform-preflight`) or `python -m <module>`."""
    import os
    import sys

    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return script if script.startswith("gpu-platform-") else f"python -m {module}"

"""gpu-platform's CrossGuard policy pack: `python -m pulumi.policy <engine> gpu_platform/policies` runs __main__.py.

Rules live in modules (cost_rules, security_rules, hygiene_rules) over shared readers of resource
properties (props) and of GPU pools (pools); __main__.py only builds the PolicyPack.
"""

from gpu_platform.policies import lifeline as _lifeline

_lifeline.install()  # only in a pack preflight started (GPU_PLATFORM_PACK_LIFELINE=1): see lifeline.py

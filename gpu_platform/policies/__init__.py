"""gpu-platform's CrossGuard policy pack: `python -m pulumi.policy <engine> gpu_platform/policies` runs __main__.py.

Rules live in modules (cost_rules, security_rules, hygiene_rules) over shared readers of resource
properties (props) and of GPU pools (pools); __main__.py only builds the PolicyPack.
"""

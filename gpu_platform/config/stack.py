"""Loading the stack file: `parse_config` validates it once, before any resource is registered.

Everything a stack file can say lives in `StackConfig` (model.py). Structural checks (types, ranges, unknown keys)
come from pydantic; checks that need the price catalog or cross several keys are plain functions that
return `ConfigIssue`s. Either way the user gets one message that names the stack file, the key (as
written in the stack file, camelCase), the bad value and what is allowed.
"""

from __future__ import annotations

import json
import typing
from typing import Any, Optional

from pydantic import BaseModel, ValidationError

from gpu_platform.config.base import MISSING, NAMESPACE, SECRET, ConfigError, ConfigIssue, non_host_range_problem
from gpu_platform.config.checks import aws as aws_checks
from gpu_platform.config.checks import gcp as gcp_checks
from gpu_platform.config.checks import kubernetes as kubernetes_checks
from gpu_platform.config.checks import linode as linode_checks
from gpu_platform.config.checks import platform as platform_checks
from gpu_platform.config.checks.pools import system_pool_warnings
from gpu_platform.config.gcp import INTERNAL_TEXT, is_internal
from gpu_platform.config.kubernetes_version import version_warnings
from gpu_platform.config.model import STRUCTURED_KEYS, StackConfig
from gpu_platform.config.derived import stack_catalog
from gpu_platform.config.names import name_issues
from gpu_platform.costs.catalog import a_cloud, load_catalog

__all__ = ["config_warnings", "load_from_pulumi", "parse_config", "semantic_issues"]

# ---------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------


def parse_config(raw: dict[str, Any], stack: str, source: Optional[str] = None,
                 secret_keys: "typing.Iterable[str]" = ()) -> StackConfig:
    """Validate the `gpu-platform` namespace of a stack. `raw` maps bare keys (no namespace) to
    values, either typed (from YAML) or as the CLI passes them (strings, JSON for structures).
    `source` is the file the values came from (messages name it); `secret_keys` the bare keys that
    are Pulumi secrets. Raises ConfigError listing every problem found."""
    values: dict[str, Any] = {}
    issues: list[ConfigIssue] = []
    secret = set(secret_keys)
    for key, value in raw.items():
        if key in secret:
            # Every gpu-platform value ends up in clear in resource names, tags, labels or cloud API fields
            # (none of which a provider stores as a secret), so a secret here would be leaked, not kept.
            issues.append(ConfigIssue(key, SECRET, SECRET_REFUSED))
            continue
        if key in STRUCTURED_KEYS and isinstance(value, str):
            try:
                value = json.loads(value)
            except (json.JSONDecodeError, RecursionError):
                issues.append(ConfigIssue(key, value, f"{_structure_of(key)}, not a string"))
                continue
        values[key] = value
    # The model also takes its Python names (monthly_budget_usd) for the code's own use; a stack file
    # must use the spelling the CLI, the policy pack and the docs read (monthlyBudgetUsd). A misspelt key
    # is reported and then read as the key it stands for, so the file's other mistakes (and that value's
    # own) come in the same run, not after the user fixed the spelling.
    misspelt = _spelling(StackConfig, values, ())
    issues += [issue for _, _, issue in misspelt]
    values = _respelt(values, misspelt)
    try:
        cfg = StackConfig.model_validate(values)
    except ValidationError as exc:
        seen = {i.key for i in issues}
        issues += [i for i in (_issue_from_pydantic(e, values) for e in _union_branches_dropped(exc.errors(), values))
                   if i.key not in seen]
        # Every mistake of the file in one run: the checks that need a typed config also run on the
        # config without the values refused above, and their findings on the other keys are added.
        rest = _without_refused(values, exc.errors())
        if rest is not None:
            seen = {i.key for i in issues}
            issues += [i for i in semantic_issues(rest) if i.key not in seen]
        raise ConfigError(stack, issues, source) from None
    except RecursionError:
        raise ConfigError(stack, [*issues, ConfigIssue("(root)", "...", "values nested less deeply")], source) from None
    # A key refused above (a section given as a string) is left out of the model: the checks would report it
    # again as missing ("gcp: (missing) required when cloud is gcp"), for a key the file does set.
    seen = {i.key for i in issues}
    issues += [i for i in semantic_issues(cfg) if i.key not in seen]
    if issues:
        raise ConfigError(stack, issues, source)
    return cfg


def _structure_of(key: str) -> str:
    """What a structured top-level key takes, in words: a list, or a mapping (of a section's keys)."""
    field = next((f for n, f in StackConfig.model_fields.items() if (f.alias or n) == key), None)
    annotation = field.annotation if field is not None else None
    if typing.get_origin(annotation) is list:
        return "a list (YAML sequence)"
    if _model_of(annotation) is not None and typing.get_origin(annotation) is not dict:
        return f"a mapping (YAML map) of the {key} section's keys"
    return "a mapping (YAML map)"


def _respelt(values: dict[str, Any], misspelt: list[tuple[tuple, str, ConfigIssue]]) -> dict[str, Any]:
    """`values` with each misspelt key moved to the key it stands for (dropped when that key is also set)."""
    if not misspelt:
        return values
    import copy

    out = copy.deepcopy(values)
    for loc, guess, _ in misspelt:
        parent: Any = out
        for part in loc[:-1]:
            parent = parent[part]
        value = parent.pop(loc[-1])
        if len(loc) == 1 and guess in STRUCTURED_KEYS and isinstance(value, str):
            try:  # the CLI passes structures as JSON, as for the key spelt right (above)
                value = json.loads(value)
            except (json.JSONDecodeError, RecursionError):
                pass  # the model then says what the key takes
        parent.setdefault(guess, value)
    return out


def _without_refused(values: dict[str, Any], errors: list[Any], rounds: int = 6) -> Optional["StackConfig"]:
    """The config validated with the refused values left out (their defaults apply), a required one
    standing in as a plain value ("x", then 1); None when that still does not validate (e.g. the cloud)."""
    import copy

    current = copy.deepcopy(values)
    removed: dict[tuple, int] = {}  # location -> stand-ins tried
    stand_ins = ("x", 1)
    for _ in range(rounds):
        for err in errors:
            loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-after[", "function-before["))))
            parent: Any = current
            for part in loc[:-1]:
                parent = parent[part] if _has(parent, part) else None
                if parent is None:
                    break
            if not loc or not isinstance(parent, dict):
                continue
            last = loc[-1]
            if err["type"] == "missing":
                tried = removed.get(loc)
                if tried is None or tried >= len(stand_ins):
                    continue  # missing in the file itself, or no stand-in fits: give up on this key
                parent[last] = stand_ins[tried]
                removed[loc] = tried + 1
            elif last in parent:
                parent.pop(last)
                removed.setdefault(loc, 0)
        try:
            return StackConfig.model_validate(current)
        except ValidationError as exc:
            errors = exc.errors()
        except RecursionError:
            return None
    return None


def _has(container: Any, part: Any) -> bool:
    if isinstance(container, dict):
        return part in container
    return isinstance(container, list) and isinstance(part, int) and 0 <= part < len(container)


SECRET_REFUSED = ("a plain value, not a secret: every gpu-platform value is written in clear into resource names, "
                  "tags, labels or cloud settings, so it cannot stay secret (set it with `pulumi config set` "
                  "without --secret; keep real secrets such as provider tokens in their provider's namespace)")


_SCALAR_BRANCHES = {"bool", "int", "float", "str", "strict-bool", "strict-int", "strict-float", "strict-str"}


def _model_names() -> set[str]:
    from gpu_platform.config.base import Model

    names, todo = set(), [Model]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub.__name__ not in names:
                names.add(sub.__name__)
                todo.append(sub)
    return names


def _union_branches_dropped(errors: list[Any], values: dict[str, Any]) -> list[Any]:
    """Pydantic reports a value that fits no member of a union (`approvedOnDemand: bool | OnDemandApproval`) once
    per member, each under the member's name (`approvedOnDemand.bool`, `approvedOnDemand.OnDemandApproval.reason`).
    Only the member of the value's shape is the user's mistake: a map is judged as the model, anything else as
    the scalar. The member's name is taken out of the key."""
    branches = _SCALAR_BRANCHES | _model_names()

    def split(err: Any) -> tuple[Optional[tuple], Optional[str]]:
        loc = tuple(err["loc"])
        for i, part in enumerate(loc):
            if isinstance(part, str) and part in branches:
                return loc[:i], part
        return None, None

    tags: dict[tuple, set[str]] = {}
    for err in errors:
        prefix, tag = split(err)
        if prefix is not None:
            tags.setdefault(prefix, set()).add(tag)
    out = []
    for err in errors:
        prefix, tag = split(err)
        if prefix is None:
            out.append(err)
            continue
        if len(tags[prefix]) > 1:
            value: Any = values
            for part in prefix:
                try:
                    value = value[part]
                except (KeyError, IndexError, TypeError):
                    value = None
                    break
            want_model = isinstance(value, dict)
            keep = {t for t in tags[prefix] if (t not in _SCALAR_BRANCHES) == want_model}
            if keep and tag not in keep:
                continue
        loc = list(err["loc"])
        del loc[len(prefix)]
        out.append({**err, "loc": tuple(loc)})
    return out


def _issue_from_pydantic(err: dict[str, Any], values: dict[str, Any]) -> ConfigIssue:
    loc = [p for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-after[", "function-before[")))]
    # Literal/union errors append the branch name; drop a trailing non-key element pydantic adds.
    key = _format_loc(loc)
    kind = err["type"]
    if kind == "missing":
        return ConfigIssue(key, MISSING, "required")
    if kind == "extra_forbidden":
        parent = _model_at(loc[:-1])
        allowed = sorted(f.alias or n for n, f in parent.model_fields.items()) if parent else []
        guess = did_you_mean(str(loc[-1]), allowed) if loc else None
        hint = f"did you mean {guess}? " if guess else ""
        return ConfigIssue(key, err.get("input"), f"unknown key; {hint}allowed keys here: {', '.join(allowed)}")
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = "must be " + msg[len("Value error, "):]
    return ConfigIssue(key, err.get("input"), msg)


def _squash(key: str) -> str:
    return key.replace("_", "").replace("-", "").lower()


def did_you_mean(key: str, allowed: "typing.Iterable[str]") -> Optional[str]:
    """The known key a misspelt one stands for: the same letters in another case or with _ or -
    (monthly_budget_usd, MonthlyBudgetUSD), else the closest by difflib."""
    import difflib

    allowed = list(allowed)
    same = [a for a in allowed if _squash(a) == _squash(key)]
    if same:
        return same[0]
    close = difflib.get_close_matches(_squash(key), [_squash(a) for a in allowed], n=1, cutoff=0.8)
    return next((a for a in allowed if close and _squash(a) == close[0]), None)


def spelling_issues(model: Any, data: Any, path: str) -> list[ConfigIssue]:
    """Keys of `data` (raw input for `model`) written in another spelling than the key the docs give:
    snake_case or other case of a camelCase key. Walks nested models, lists and mappings of models."""
    return [issue for _, _, issue in _spelling(model, data, (), path)]


def _spelling(model: Any, data: Any, loc: tuple, path: str = "") -> list[tuple[tuple, str, ConfigIssue]]:
    """(location in `data`, the key it stands for, the issue) of each misspelt key."""
    if not isinstance(data, dict) or not (isinstance(model, type) and issubclass(model, BaseModel)):
        return []
    found = []
    fields = {(f.alias or n): f for n, f in model.model_fields.items()}
    for key, value in data.items():
        where = f"{path}.{key}" if path else str(key)
        field = fields.get(key)
        if field is None:
            guess = did_you_mean(str(key), fields)
            if guess and guess != key:
                found.append(((*loc, key), guess, ConfigIssue(where, value, f"unknown key; did you mean {guess}?")))
            continue
        annotation = field.annotation
        sub = _model_of(annotation)
        if sub is None:
            continue
        origin = typing.get_origin(annotation)
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if origin is list and isinstance(value, list):
            found += [f for n, v in enumerate(value) for f in _spelling(sub, v, (*loc, key, n), f"{where}[{n}]")]
        elif origin is dict and isinstance(value, dict):
            found += [f for k, v in value.items() for f in _spelling(sub, v, (*loc, key, k), f"{where}.{k}")]
        elif isinstance(value, dict) and (origin is None or args):
            found += _spelling(sub, value, (*loc, key), where)
    return found


def _format_loc(loc: list[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(root)"


def _model_at(loc: list[Any]) -> Optional[type[BaseModel]]:
    """The model class that a config path points into, for listing its allowed keys."""
    model: Any = StackConfig
    parts = list(loc)
    while parts:
        part = parts.pop(0)
        if isinstance(part, int):
            continue
        field = next((f for n, f in model.model_fields.items() if (f.alias or n) == part), None)
        if field is None:
            return None
        if typing.get_origin(field.annotation) is dict and parts:
            parts.pop(0)  # the user's own key (e.g. a pool name) under a mapping of models
        model = _model_of(field.annotation)
        if model is None:
            return None
    return model


def _model_of(annotation: Any) -> Optional[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def semantic_issues(cfg: StackConfig) -> list[ConfigIssue]:
    """Checks that span keys or need the catalog; per-cloud rules live in checks/<cloud>.py."""
    issues: list[ConfigIssue] = []
    if cfg.cloud_section is None:
        issues.append(ConfigIssue(cfg.cloud, MISSING, f"required when cloud is {cfg.cloud}"))
        return issues

    names = [p.name for p in cfg.gpu_pools]
    for i, name in enumerate(names):
        if names.index(name) != i:
            issues.append(ConfigIssue(f"gpuPools[{i}].name", name, "unique among gpuPools"))

    own_nodes = cfg.cloud == "kubernetes"
    base = load_catalog()
    if own_nodes:  # the stack's own node types (kubernetes.nodeTypes); priceOverrides is refused by its check
        catalog = stack_catalog(cfg)
    else:
        for key in cfg.price_overrides:
            if base.instance(cfg.cloud, key) is None:
                issues.append(ConfigIssue(f"priceOverrides.{key}", key, f"{a_cloud(cfg.cloud)} instance type in the catalog"))
        catalog = load_catalog(cfg.catalog_overrides()) if cfg.price_overrides and not issues else base
    known = sorted(t.name for t in catalog.gpu_instances(cfg.cloud))
    for i, pool in enumerate(cfg.gpu_pools):
        if pool.min_nodes > pool.max_nodes:
            issues.append(ConfigIssue(f"gpuPools[{i}].minNodes", pool.min_nodes, f"at most maxNodes ({pool.max_nodes})"))
        itype = catalog.instance(cfg.cloud, pool.instance_type)
        if itype is None or not itype.is_gpu:
            if own_nodes:
                what = ("is a node type without GPUs" if itype is not None else
                        "is not a kubernetes.nodeTypes key" if pool.instance_type not in cfg.kubernetes.node_types
                        else "names a catalog type that does not exist")
                issues.append(ConfigIssue(f"gpuPools[{i}].instanceType", pool.instance_type,
                                          f"{pool.instance_type} {what}; allowed: the node types with GPUs "
                                          f"({', '.join(known) or 'none: give one gpus above 0'})"))
                continue
            what = "has no GPU" if itype is not None else f"is not {a_cloud(cfg.cloud)} GPU type in the catalog"
            issues.append(ConfigIssue(f"gpuPools[{i}].instanceType", pool.instance_type,
                                      f"{pool.instance_type} {what}; allowed: {', '.join(known)}"))
        elif own_nodes:
            continue  # priced by the stack's node types, all or none (checks/kubernetes.py)
        elif not itype.priced_somewhere(pool.capacity):
            # The budget alert's spend rule and the cost estimate price every pool: a type without a price at this
            # capacity in any region would crash them, so it is a config error naming both ways out. Priced in
            # some regions but not the stack's (AWS Spot of p4d: eu-west-1, not us-east-1): the bill is refused
            # (exit 3) naming the type and the region (costs/estimator.py RegionPriceRefused).
            priced = [c for c in ("on-demand", "spot", "preemptible") if itype.priced_somewhere(c)]
            override = {"on-demand": "onDemand"}.get(pool.capacity, pool.capacity)
            issues.append(ConfigIssue(
                f"gpuPools[{i}].capacity", pool.capacity,
                f"a capacity the price catalog prices for {pool.instance_type}: {', '.join(priced) or 'none'}; "
                f"or price it yourself with priceOverrides.{pool.instance_type}.{override} (USD per node-hour)"))

    checks = {"linode": linode_checks.check_stack, "gcp": gcp_checks.check_stack, "aws": aws_checks.check_stack,
              "kubernetes": kubernetes_checks.check_stack}
    issues += checks[cfg.cloud](cfg, catalog)
    issues += private_range_issues(cfg)
    issues += platform_checks.check_stack(cfg)
    if not issues:  # names are built from keys already valid on their own
        issues += name_issues(cfg)
    if not issues:
        issues += linode_checks.upgrade_job_name_issues(cfg)
    return issues


def private_range_issues(cfg: StackConfig) -> list[ConfigIssue]:
    """Pod and service ranges stay inside the cluster: private IPv4 (RFC 1918, RFC 6598), as the clusters
    are IPv4. A public pod range on Linode would become a firewall rule accepting the Internet
    (8.8.0.0/16), an IPv6 one a value the firewall's ipv4s refuses. EKS clusters here are IPv4, so their
    admin ranges (publicAccessCidrs, security groups) are IPv4 too."""
    import ipaddress

    issues = []
    if cfg.cloud == "linode" and cfg.linode is not None:
        for key, value in (("linode.podCidr", cfg.linode.pod_cidr), ("linode.serviceCidr", cfg.linode.service_cidr)):
            if not is_internal(ipaddress.ip_network(value)):
                issues.append(ConfigIssue(key, value, f"a private IPv4 range inside {INTERNAL_TEXT} (the cluster is IPv4 "
                                                      "and its firewall trusts this range)"))
    for i, cidr in enumerate(cfg.admin_cidrs):
        problem = non_host_range_problem(ipaddress.ip_network(cidr))
        if problem:
            issues.append(ConfigIssue(f"adminCidrs[{i}]", cidr,
                                      f"the public ranges (or a VPN's) your administrators connect from: {problem}, "
                                      "never the source of a connection to the cluster's API or SSH"))
    if cfg.cloud == "aws":
        for i, cidr in enumerate(cfg.admin_cidrs):
            if ipaddress.ip_network(cidr).version != 4:
                issues.append(ConfigIssue(f"adminCidrs[{i}]", cidr, "an IPv4 range (the EKS cluster is IPv4: its API "
                                                                    "endpoint's publicAccessCidrs take IPv4 ranges)"))
    return issues


def config_warnings(cfg: StackConfig) -> list[str]:
    """Problems that do not stop a deploy but need a person soon (e.g. a version near end of support)."""
    return (system_pool_warnings(cfg) + version_warnings(cfg) + platform_checks.platform_warnings(cfg)
            + platform_checks.reserved_alert_address_warnings(cfg)
            + aws_checks.termination_handler_warnings(cfg)
            + linode_checks.token_expiry_warnings(cfg) + linode_checks.image_registry_warnings(cfg)
            + linode_checks.pki_warnings(cfg) + linode_checks.upgrade_step_warnings(cfg)
            + gcp_checks.shutdown_grace_warnings(cfg) + gcp_checks.assumed_offering_warnings(cfg)
            + kubernetes_checks.kubernetes_warnings(cfg))


def load_from_pulumi() -> StackConfig:
    """Read and validate the stack's `gpu-platform` namespace from the running Pulumi program.
    On a bad stack file raises pulumi.RunError, which the CLI prints without a traceback."""
    import pulumi
    from pulumi.runtime import config as runtime_config

    # The language host passes config in PULUMI_CONFIG; tests and preflight set it in-process.
    everything = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    prefix = f"{NAMESPACE}:"
    raw = {k[len(prefix):]: v for k, v in everything.items() if k.startswith(prefix)}
    # Secret keys: PULUMI_CONFIG_SECRET_KEYS from the language host, or set_all_config's list in-process.
    secret = {k for k in everything if runtime_config.is_config_secret(k)}
    secret |= set(runtime_config.get_config_secret_keys_env())
    from gpu_platform.data.versions_calendar import today_problem

    problem = today_problem()
    if problem:
        raise pulumi.RunError(problem)
    try:
        cfg = parse_config(raw, pulumi.get_stack(), secret_keys={k[len(prefix):] for k in secret if k.startswith(prefix)})
    except ConfigError as exc:
        raise pulumi.RunError(str(exc)) from None
    for warning in config_warnings(cfg):
        pulumi.log.warn(warning)
    return cfg

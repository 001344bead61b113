"""The stack's own settings as the policy pack sees them: read from the same config the program reads and
validated by the same model (gpu_platform.config.stack), never by a second, looser parser.

The config comes from PULUMI_CONFIG, as the Pulumi CLI hands it to a pack; preflight leaves it out of a config
too big for one environment string (capped at 128 KiB) and hands the pack a file instead, which counts only
when preflight started the pack (its lifeline, lifeline.py, reads it at start-up), never from a variable alone. The whole namespace is validated with
`parse_config`; when it does not validate (a pack run on a partial config, as the tests do) each setting
the pack needs is validated alone with its field's type from the same model, so `monthly_budget_usd`
or a budget of "1e12" never reaches a rule.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Optional

CONFIG_FILE_ENV = "GPU_PLATFORM_STACK_CONFIG_FILE"
NAMESPACE = "gpu-platform"


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number the pack accepts")


# The config file's text, once take_config_file has read (and deleted) it.
_taken: Optional[str] = None


def take_config_file() -> None:
    """Read the file GPU_PLATFORM_STACK_CONFIG_FILE names into memory and delete it (lifeline.py): the pack
    keeps no copy of the config on disk once it runs. Called only where preflight started the pack (its
    lifeline); nothing else makes the file count."""
    global _taken
    path = os.environ.get(CONFIG_FILE_ENV)
    if not path or _taken is not None:
        return
    try:
        with open(path, encoding="utf-8") as f:
            _taken = f.read()
    except OSError:
        return
    try:
        os.unlink(path)
    except OSError:
        pass


def raw_config() -> dict[str, Any]:
    """The stack config the pack was handed: namespaced keys -> CLI strings. PULUMI_CONFIG, as the Pulumi CLI
    hands it to a pack, whenever it is set; the file GPU_PLATFORM_STACK_CONFIG_FILE named only when preflight
    started the pack (lifeline.py took it at start-up) and left PULUMI_CONFIG out (a config too big for one
    environment string). A variable set around `pulumi preview` cannot swap the config the pack judges (a
    copy with a budget of $10,000,000 beside the real one in PULUMI_CONFIG)."""
    try:
        env = os.environ.get("PULUMI_CONFIG")
        text = env if env is not None else (_taken if _taken is not None else "{}")
        config = json.loads(text or "{}", parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        return {}
    return config if isinstance(config, dict) else {}


@dataclass(frozen=True)
class StackSettings:
    cloud: Optional[str] = None
    monthly_budget_usd: Optional[int] = None
    alert_emails: tuple[str, ...] = ()
    # platform.alertSmtp (config.platform.AlertSmtp), the relay Alertmanager mails alertEmails through; None when
    # the config sets none (or the pack was handed no config).
    alert_smtp: Any = field(default=None, compare=False)
    # Why a setting could not be read (named in the rules' messages), e.g. a wrong budget value.
    problems: tuple[str, ...] = field(default_factory=tuple)
    # Why the platform section could not be read (budget-alerts-required names it instead of a missing relay).
    platform_problem: Optional[str] = None
    # The whole validated StackConfig when the config validates (preflight's and the CLI's always do; a pack run
    # on a partial config has none): the cost ceiling reads the bucket, NAT and Kubernetes version from it.
    config: Any = field(default=None, compare=False)


def _one(field_name: str, value: Any) -> tuple[Any, Optional[str]]:
    """`value` validated by StackConfig's own field `field_name` (CLI strings decoded like parse_config)."""
    from pydantic import TypeAdapter, ValidationError

    from gpu_platform.config.model import STRUCTURED_KEYS, StackConfig

    info = StackConfig.model_fields[field_name]
    key = info.alias or field_name
    if key in STRUCTURED_KEYS and isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None, f"{NAMESPACE}:{key} is not valid JSON"
    try:
        return TypeAdapter(info.annotation).validate_python(value), None
    except ValidationError as exc:
        return None, f"{NAMESPACE}:{key}: {exc.errors()[0]['msg']}"
    except Exception as exc:  # noqa: BLE001 (a constraint the adapter cannot apply alone)
        return None, f"{NAMESPACE}:{key}: {exc}"


def _parse(text: str) -> StackSettings:
    from gpu_platform.config.base import ConfigError
    from gpu_platform.config.stack import parse_config

    config = json.loads(text)
    prefix = f"{NAMESPACE}:"
    raw = {k[len(prefix):]: v for k, v in config.items() if isinstance(k, str) and k.startswith(prefix)}
    try:
        cfg = parse_config(raw, os.environ.get("PULUMI_STACK") or "stack")
        return StackSettings(cfg.cloud, cfg.monthly_budget_usd, tuple(cfg.alert_emails),
                             alert_smtp=cfg.platform.alert_smtp, config=cfg)
    except ConfigError:
        pass
    except Exception:  # noqa: BLE001 (a config the model cannot even walk: read field by field)
        pass
    problems = []
    values: dict[str, Any] = {}
    for name, key in (("cloud", "cloud"), ("monthly_budget_usd", "monthlyBudgetUsd"), ("alert_emails", "alertEmails")):
        if key not in raw:
            continue
        value, problem = _one(name, raw[key])
        if problem:
            problems.append(problem)
        else:
            values[name] = value
    platform, platform_problem = _one("platform", raw["platform"]) if "platform" in raw else (None, None)
    return StackSettings(values.get("cloud"), values.get("monthly_budget_usd"),
                         tuple(values.get("alert_emails") or ()), getattr(platform, "alert_smtp", None),
                         tuple(problems), platform_problem=platform_problem)


@lru_cache(maxsize=4)
def _cached(text: str) -> StackSettings:
    return _parse(text)


# One reader at a time: an analysis that asks while the read-ahead thread parses waits for that parse instead of
# running a second one beside it (lru_cache alone lets both run).
_SETTINGS_READ = threading.Lock()


def stack_settings() -> StackSettings:
    text = json.dumps(raw_config(), sort_keys=True)
    with _SETTINGS_READ:
        return _cached(text)


def read_settings_ahead() -> None:
    """Read the stack's settings before the first stack analysis asks for them (__main__.py runs this in its
    read-ahead thread, after the catalog): importing the config model and validating the config take about half a
    CPU-second, and that analysis is the last step of a preflight, while the pack waits idle for the program to run.
    The config is fixed for the life of the process (PULUMI_CONFIG, or the file lifeline.py took at import)."""
    try:
        stack_settings()
    except Exception:  # noqa: BLE001 the analysis reads them again and reports what it finds
        pass

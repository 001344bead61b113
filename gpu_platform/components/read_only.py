"""A read-only run: a `pulumi preview` whose credentials are read-only stand-ins for the deploy's (drift.yml:
docs/ci.md, "Drift"). The program derives some inputs from the deploy credentials (a provider's token, a Secret
holding a token, a name carrying a token's digest); with a stand-in they would differ from what the state holds,
and `pulumi preview --expect-no-changes` would report that update on every run, drift or not.

In a read-only run those inputs are compared with the state's own value (ignoreChanges: the engine takes the old
input before the diff), so the preview shows only what changed outside Pulumi or in the program. `pulumi up` is
refused with the variable set: there it would keep a rotated token out of the cluster."""

from __future__ import annotations

import os

import pulumi

READ_ONLY_ENV = "GPU_PLATFORM_READ_ONLY_RUN"

# A Kubernetes Secret's content, as ignoreChanges must name it: pulumi-kubernetes' Check turns `stringData` into
# base64 `data` (provider/pkg/clients/unstructured.go normalizeSecret), so the state holds `data` and no `stringData`,
# while the engine resets ignored paths in the program's inputs before Check (pkg/resource/deploy/step_generator.go
# processIgnoreChanges; PropertyPath.Reset deletes a leaf the old inputs lack). `stringData.token` alone would drop
# the token from the new inputs and show `data.token` removed; both names together keep the state's `data` whole.
SECRET_CONTENT = ("stringData", "data")


def read_only_run() -> bool:
    """Whether this run is a read-only preview ($GPU_PLATFORM_READ_ONLY_RUN set, not "0"). pulumi.RunError when it
    is set outside a preview."""
    if os.environ.get(READ_ONLY_ENV, "") in ("", "0"):
        return False
    if not pulumi.runtime.is_dry_run():
        raise pulumi.RunError(
            f"{READ_ONLY_ENV} is set: a read-only run keeps credential inputs as the state holds them, which only a "
            "preview may do (`pulumi up` would keep a rotated token out of the cluster). Unset it for `pulumi up` "
            "(docs/ci.md, \"Drift\")")
    return True


def keep_from_state(*paths: str) -> list[str]:
    """ignoreChanges paths (wire names: `environment.LINODE_TOKEN`, `values.secretRef.name`) for inputs that carry a deploy
    credential, or something derived from one, in a read-only run; none otherwise."""
    return list(paths) if read_only_run() else []

"""The stack file, typed: everything `gpu-platform:` keys mean, checked before any resource exists.

`stack` loads and validates a stack (`load_from_pulumi`, `parse_config`, `StackConfig`); `base` holds the
field types every section shares; `aws`, `gcp`, `linode`, `kubernetes` (a cluster the stack does not create) and
`platform` are the per-cloud and platform sections (`linode_network`: Linode's shared address ranges, without a
model, for the policy pack); `catalog` is the catalog a stack's instance types come from; `names` derives the cloud
resource names; `kubernetes_version` and `versions_calendar` check versions against the dated calendar; `approvals`
checks who approved an exception and until when.
"""

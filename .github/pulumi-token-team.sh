#!/usr/bin/env bash
# Usage: pulumi-token-team.sh TEAM. Fails unless $PULUMI_ACCESS_TOKEN is a team token of the Pulumi Cloud team
# TEAM (docs/ci.md, "One Pulumi Cloud team and token per stack"). One token shared by every preview-<stack>
# environment would let a pull request read the token of an environment without reviewers and decrypt another
# stack's state with it; this check makes such a token fail every preview but its own stack's. It asks Pulumi
# Cloud who the token is (GET /api/user: its tokenInfo names the token's team, pulumi/pulumi
# pkg/backend/httpstate/client/client.go serviceTokenInfo); it prints the team's name, never the token.
set -euo pipefail
want="${1:?usage: pulumi-token-team.sh TEAM}"
: "${PULUMI_ACCESS_TOKEN:?PULUMI_ACCESS_TOKEN is not set: the environment lacks its Pulumi token (docs/ci.md)}"
info=$(curl -fsS --retry 3 -H "Accept: application/vnd.pulumi+8" -H "Authorization: token $PULUMI_ACCESS_TOKEN" \
  "${PULUMI_API:-https://api.pulumi.com}/api/user")
team=$(printf '%s' "$info" | python3 -c 'import json, sys; print((json.load(sys.stdin).get("tokenInfo") or {}).get("team") or "")')
if [ "$team" != "$want" ]; then
  echo "::error::The Pulumi token of this environment is ${team:+a team token of $team}${team:-not a team token}, not one of the team $want: give each stack its own team (Stack Read, or Stack Write to deploy, on that stack only) and put its token in that stack's environment only (docs/ci.md, Repository settings)." >&2
  exit 1
fi
echo "the Pulumi token is a team token of $team"

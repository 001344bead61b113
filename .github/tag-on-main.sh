#!/usr/bin/env bash
# A release tag publishes only a commit that main already has (docs/ci.md, "Repository settings"): anyone who
# can push a `v*` tag could otherwise tag a commit of their own branch, never reviewed, and have it released
# and its images pushed to GHCR. Run after actions/checkout with `fetch-depth: 0`, which fetches every branch
# as origin/<branch> (actions/checkout src/ref-helper.ts, getRefSpecForAllHistory).
set -euo pipefail
sha="${GITHUB_SHA:?GITHUB_SHA is not set}"
ref="${GITHUB_REF_NAME:-$sha}"
if ! git rev-parse --verify --quiet origin/main >/dev/null; then
  echo "::error::tag-on-main.sh: origin/main was not fetched (actions/checkout needs fetch-depth: 0)" >&2
  exit 1
fi
if ! git merge-base --is-ancestor "$sha" origin/main; then
  echo "::error::$ref points at $sha, which is not on main: a release publishes only what main has (tag a commit of main)" >&2
  exit 1
fi
echo "$ref ($sha) is on main"

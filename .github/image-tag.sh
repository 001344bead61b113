#!/usr/bin/env bash
# The training image's tag for this GitHub Actions run, as `version=<tag>` for $GITHUB_OUTPUT: the
# release version without its `v` on a release tag (refs/tags/v1.2.3 -> 1.2.3), `sha-<12 hex>` on every
# other event (a pull request's ref name, `<n>/merge`, is not a valid image tag).
set -euo pipefail
case "${GITHUB_REF:-}" in
  refs/tags/v*) version="${GITHUB_REF#refs/tags/v}" ;;
  *) version="sha-${GITHUB_SHA:0:12}" ;;
esac
# Docker's tag grammar: [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}
if ! [[ "$version" =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]]; then
  echo "image-tag.sh: $GITHUB_REF gives $version, not a valid image tag" >&2
  exit 1
fi
echo "version=$version"

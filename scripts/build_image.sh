#!/usr/bin/env bash
# Builds the platform's image (deploy/images/Containerfile) from the repository's root, its
# base pinned by digest:
#   scripts/build_image.sh REGISTRY/chat-platform:0.1.0
# The base's digest is asked of the registry when the build runs (PYTHON_IMAGE may name one
# already: python:3.11.7-slim-bookworm@sha256:...); the build prints the reference it used.
# podman builds in the docker format: the OCI format has no HEALTHCHECK, and podman drops it.
set -euo pipefail
cd "$(dirname "$0")/.."
tag="${1:?usage: $0 IMAGE:TAG}"
base="${PYTHON_IMAGE:-docker.io/library/python:3.11.7-slim-bookworm}"
if [[ "$base" != *@sha256:* ]]; then
  if command -v skopeo > /dev/null; then
    digest="$(skopeo inspect --format '{{.Digest}}' "docker://$base")"
  else
    podman pull --quiet "$base" > /dev/null
    digest="$(podman image inspect --format '{{.Digest}}' "$base")"
  fi
  base="$base@$digest"
fi
echo "base image: $base" >&2
podman build --format docker --build-arg "PYTHON_IMAGE=$base" \
  -f deploy/images/Containerfile -t "$tag" .

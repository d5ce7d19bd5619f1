#!/usr/bin/env bash
# Make the local stand-in for gcr.io/oss-fuzz-base/base-builder-rust (docker/oss-fuzz/
# Dockerfile), for machines without a registry; .clusterfuzzlite/Dockerfile then builds
# FROM it unchanged.  It starts FROM rust:1.95-slim-bookworm, which
# docker/base/make-base-images.sh makes without a registry.  Idempotent: an existing
# tag is kept (--force rebuilds it).  Someone who can pull never runs this.
set -euo pipefail
TAG=gcr.io/oss-fuzz-base/base-builder-rust
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
die() { echo "make-base-builder.sh: $*" >&2; exit 2; }
command -v docker >/dev/null || die "docker not found"
if [ "${1:-}" != --force ] && docker image inspect "$TAG" >/dev/null 2>&1; then
  echo "make-base-builder.sh: $TAG exists (--force rebuilds it)" >&2
  exit 0
fi
docker image inspect rust:1.95-slim-bookworm >/dev/null 2>&1 || bash "$ROOT/docker/base/make-base-images.sh"
docker build -f "$ROOT/docker/oss-fuzz/Dockerfile" -t "$TAG" "$ROOT"

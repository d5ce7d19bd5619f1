#!/usr/bin/env bash
# Make the base images the Dockerfiles start FROM, without a container
# registry: debootstrap Debian bookworm from Debian's own package archive,
# then `docker import` it under the official tags, so the ordinary FROM lines
#   FROM debian:bookworm-slim
#   FROM rust:1.95-slim-bookworm
# resolve to local images.  A user who can pull from Docker Hub never needs
# this script (the official images are used instead).
#
#   docker/base/make-base-images.sh [--force]
#
# Idempotent: a tag that already exists is left alone (--force remakes it).
# The Rust image carries the host's toolchain (rustup's RUST_VERSION, default
# 1.95.0, from ~/.rustup) laid out like the official image
# (RUSTUP_HOME=/usr/local/rustup, CARGO_HOME=/usr/local/cargo): Debian
# bookworm's own rustc (1.63) is too old for quiche's dependencies.
# Both images carry the host's CA bundle (/etc/ssl/certs/ca-certificates.crt)
# so that builds verify HTTPS to crates.io / PyPI like the host does.
# Needs root (debootstrap, chroot), docker, and the debootstrap package
# (installed with apt-get when missing).
set -euo pipefail

die() { echo "make-base-images.sh: $*" >&2; exit 1; }
log() { echo "make-base-images.sh: $*" >&2; }

FORCE=0
[ "${1:-}" = --force ] && FORCE=1
SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
RUST_VERSION=${RUST_VERSION:-1.95.0}
RUST_TAG=${RUST_VERSION%.*}                      # 1.95.0 -> 1.95
DEBIAN_IMAGE=debian:$SUITE-slim
RUST_IMAGE=rust:$RUST_TAG-slim-$SUITE
HOST_CA=/etc/ssl/certs/ca-certificates.crt
TOOLCHAIN=${RUSTUP_HOME:-$HOME/.rustup}/toolchains/$RUST_VERSION-x86_64-unknown-linux-gnu

command -v docker >/dev/null || die "docker not found"
[ "$(id -u)" = 0 ] || die "needs root (debootstrap and chroot)"
have() { [ "$FORCE" = 0 ] && docker image inspect "$1" >/dev/null 2>&1; }

if have "$DEBIAN_IMAGE" && have "$RUST_IMAGE"; then
  log "$DEBIAN_IMAGE and $RUST_IMAGE exist; nothing to do (--force remakes them)"
  exit 0
fi
if ! command -v debootstrap >/dev/null; then
  log "installing debootstrap (apt-get)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null
fi

WORK=$(mktemp -d /var/tmp/ccdiff-base.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
ROOT=$WORK/rootfs

# Like the official slim image: minbase, no docs/man pages/locales, no apt lists.
slim_rootfs() {
  log "debootstrap $SUITE (minbase) from $MIRROR"
  debootstrap --variant=minbase --include=ca-certificates "$SUITE" "$ROOT" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 \
    || { tail -20 "$WORK/debootstrap.log" >&2; die "debootstrap failed"; }
  mkdir -p "$ROOT/etc/dpkg/dpkg.cfg.d"
  cat >"$ROOT/etc/dpkg/dpkg.cfg.d/docker" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
CFG
  # The official image's apt settings: no package caches left in layers.
  cat >"$ROOT/etc/apt/apt.conf.d/docker-clean" <<'CFG'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
CFG
  printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' >"$ROOT/etc/apt/apt.conf.d/docker-no-recommends"
  # deb.debian.org plus security updates, as in the official image.
  cat >"$ROOT/etc/apt/sources.list" <<SRC
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb http://deb.debian.org/debian-security $SUITE-security main
SRC
  host_ca "$ROOT"
}

# The host's CA bundle, appended so a corporate proxy's CA is trusted too.
host_ca() {
  [ -f "$HOST_CA" ] || return 0
  mkdir -p "$1/usr/local/share/ca-certificates"
  cp "$HOST_CA" "$1/usr/local/share/ca-certificates/host-bundle.crt"
  cat "$HOST_CA" >>"$1/etc/ssl/certs/ca-certificates.crt"
}

clean_rootfs() {
  rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/var/cache/apt/archives/*.deb \
         "$1"/usr/share/doc/*/changelog* "$1"/usr/share/man/* "$1"/usr/share/locale/* \
         "$1"/var/log/* "$1"/tmp/* "$1"/root/.cache
}

import() {  # import ROOTFS TAG [--change ...]
  local root=$1 tag=$2; shift 2
  log "docker import -> $tag"
  tar --numeric-owner -C "$root" -c . | docker import "$@" --change 'CMD ["bash"]' - "$tag" >/dev/null
}

slim_rootfs
clean_rootfs "$ROOT"
if ! have "$DEBIAN_IMAGE"; then
  import "$ROOT" "$DEBIAN_IMAGE" --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
fi

if ! have "$RUST_IMAGE"; then
  [ -x "$TOOLCHAIN/bin/rustc" ] || die "no Rust $RUST_VERSION toolchain at $TOOLCHAIN (rustup toolchain install $RUST_VERSION)"
  "$TOOLCHAIN/bin/rustc" --version | grep -q "^rustc $RUST_VERSION " || die "$TOOLCHAIN is not rustc $RUST_VERSION"
  # What the official rust:*-slim image adds on top of debian slim: gcc, libc6-dev.
  log "chroot apt-get install gcc libc6-dev"
  cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
  chroot "$ROOT" sh -c 'apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q gcc libc6-dev' \
    >"$WORK/apt.log" 2>&1 || { tail -20 "$WORK/apt.log" >&2; die "apt-get in the chroot failed"; }
  : >"$ROOT/etc/resolv.conf"
  clean_rootfs "$ROOT"
  dest=$ROOT/usr/local/rustup/toolchains/$RUST_VERSION-x86_64-unknown-linux-gnu
  mkdir -p "$dest" "$ROOT/usr/local/cargo/bin"
  # bin, lib, libexec, etc: everything but share/ (HTML docs, 800 MB).
  cp -a "$TOOLCHAIN/bin" "$TOOLCHAIN/lib" "$TOOLCHAIN/libexec" "$TOOLCHAIN/etc" "$dest/"
  for tool in "$dest"/bin/*; do ln -s "../../rustup/toolchains/${dest##*/}/bin/${tool##*/}" "$ROOT/usr/local/cargo/bin/"; done
  printf 'version = "12"\ndefault_toolchain = "%s"\nprofile = "minimal"\n' "${dest##*/}" >"$ROOT/usr/local/rustup/settings.toml"
  chmod -R a+rwX "$ROOT/usr/local/cargo"
  import "$ROOT" "$RUST_IMAGE" \
    --change 'ENV RUSTUP_HOME=/usr/local/rustup' --change 'ENV CARGO_HOME=/usr/local/cargo' \
    --change "ENV RUST_VERSION=$RUST_VERSION" \
    --change 'ENV PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
fi
docker image ls --format '{{.Repository}}:{{.Tag}}  {{.Size}}' | grep -E "^($DEBIAN_IMAGE|$RUST_IMAGE) " >&2 || true

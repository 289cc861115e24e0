# Shared by the package scripts: version numbers and a staged `make install`.
set -euo pipefail
TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILDDIR=${BUILDDIR:-build}
case "$BUILDDIR" in /*) ;; *) BUILDDIR="$TOP/$BUILDDIR";; esac
mkvar() { sed -n "s/^$1 *:= *//p" "$TOP/makefiles/version.mk"; }
NCCL_VER="$(mkvar NCCL_MAJOR).$(mkvar NCCL_MINOR).$(mkvar NCCL_PATCH)"
MEND_VER=$(mkvar MEND_VERSION)
PKG_REV=$(mkvar PKG_REVISION)
ARCH_DEB=$(dpkg --print-architecture 2>/dev/null || echo amd64)
ARCH=$(uname -m)
PKGDIR="$BUILDDIR/pkg"
stage() { # stage DIR PREFIX: install the build into DIR under PREFIX
  rm -rf "$1"; make -C "$TOP" --no-print-directory BUILDDIR="$BUILDDIR" install DESTDIR="$1" PREFIX="$2" >/dev/null
}

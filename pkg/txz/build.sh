#!/usr/bin/env bash
# Tarball in NCCL's naming: nccl_<version><suffix>-<rev>+host_<arch>.txz (lib/, include/, bin/).
source "$(dirname "$0")/../common.sh"
NAME="nccl_${NCCL_VER}-mend-${PKG_REV}+host_${ARCH}"
S="$PKGDIR/txz/$NAME"; stage "$S" /
(cd "$PKGDIR/txz" && tar -cJf "$NAME.txz" "$NAME")
echo "$PKGDIR/txz/$NAME.txz"

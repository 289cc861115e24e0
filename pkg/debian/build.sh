#!/usr/bin/env bash
# Debian packages: libnccl2-mend (runtime) and libnccl-mend-dev (headers, static library, pkg-config).
# They provide, conflict with and replace NVIDIA's libnccl2 / libnccl-dev: a drop-in.
source "$(dirname "$0")/../common.sh"
LIBDIR=usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
VER="$NCCL_VER-$PKG_REV+mend$MEND_VER"
S="$PKGDIR/debian/stage"; stage "$S" /usr
mkdir -p "$PKGDIR/debian"
make_pkg() { # name description provides files...
  local name=$1 desc=$2 prov=$3; shift 3
  local root="$PKGDIR/debian/$name"
  rm -rf "$root"; mkdir -p "$root/DEBIAN" "$root/$LIBDIR"
  for f in "$@"; do
    local dst="$root/$(dirname "$f" | sed "s|^usr/lib|$LIBDIR|")"; mkdir -p "$dst"; cp -a "$S/$f" "$dst/"
  done
  cat > "$root/DEBIAN/control" <<CTL
Package: $name
Version: $VER
Architecture: $ARCH_DEB
Maintainer: Mend developers <mend@localhost>
Section: libs
Priority: optional
Provides: $prov (= $NCCL_VER)
Conflicts: $prov
Replaces: $prov
Depends: libc6
Description: $desc
 Mend is a drop-in libnccl.so.2 whose collectives survive NIC, link and port failures.
CTL
  [ "$name" = libnccl2-mend ] && printf 'activate-noawait ldconfig\n' > "$root/DEBIAN/triggers"
  dpkg-deb --root-owner-group --build "$root" "$PKGDIR/debian/${name}_${VER}_${ARCH_DEB}.deb" >/dev/null
  echo "$PKGDIR/debian/${name}_${VER}_${ARCH_DEB}.deb"
}
make_pkg libnccl2-mend "Mend: resilient NCCL-compatible collective communication library" libnccl2 \
  usr/lib/libnccl.so.$NCCL_VER usr/lib/libnccl.so.2
make_pkg libnccl-mend-dev "Mend: development files (nccl.h, static library, pkg-config)" libnccl-dev \
  usr/include/nccl.h usr/lib/libnccl.so usr/lib/libnccl_static.a usr/lib/pkgconfig/nccl.pc

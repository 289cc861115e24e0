#!/usr/bin/env bash
# Debian packages: libnccl2-mend (runtime: the library alone, as NVIDIA's libnccl2),
# libnccl-mend-dev (nccl.h, the static library, libnccl.so and nccl.pc) and mend-tools (mend-info,
# mend-run, the perf tools, failover_perf and the testbed modules they import).  The first two
# provide, conflict with and replace NVIDIA's libnccl2 / libnccl-dev: a drop-in.  Libraries go to the
# multiarch directory, as Debian's and NVIDIA's do.
source "$(dirname "$0")/../common.sh"
MULTIARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
LIBDIR=usr/lib/$MULTIARCH
VER="$NCCL_VER-$PKG_REV+mend$MEND_VER"
S="$PKGDIR/debian/stage"; stage "$S" /usr
# nccl.pc names the directory its library is in.
sed -i "s|^libdir=.*|libdir=\${prefix}/lib/$MULTIARCH|" "$S/usr/lib/pkgconfig/nccl.pc"
mkdir -p "$PKGDIR/debian"
make_pkg() { # name description provides depends files...
  local name=$1 desc=$2 prov=$3 deps=$4; shift 4
  local root="$PKGDIR/debian/$name"
  rm -rf "$root"; mkdir -p "$root/DEBIAN"
  for f in "$@"; do
    local dst; dst="$root/$(dirname "$f" | sed "s|^usr/lib|$LIBDIR|")"; mkdir -p "$dst"; cp -a "$S/$f" "$dst/"
  done
  {
    printf 'Package: %s\nVersion: %s\nArchitecture: %s\n' "$name" "$VER" "$ARCH_DEB"
    printf 'Maintainer: Mend developers <mend@localhost>\nSection: %s\nPriority: optional\n' \
      "$([ -n "$prov" ] && echo libs || echo net)"
    [ -n "$prov" ] && printf 'Provides: %s (= %s)\nConflicts: %s\nReplaces: %s\n' "$prov" "$NCCL_VER" "$prov" "$prov"
    printf 'Depends: %s\nDescription: %s\n' "$deps" "$desc"
    printf ' Mend is a drop-in libnccl.so.2 whose collectives survive NIC, link and port failures.\n'
  } > "$root/DEBIAN/control"
  [ "$name" = libnccl2-mend ] && printf 'activate-noawait ldconfig\n' > "$root/DEBIAN/triggers"
  dpkg-deb --root-owner-group --build "$root" "$PKGDIR/debian/${name}_${VER}_${ARCH_DEB}.deb" >/dev/null
  echo "$PKGDIR/debian/${name}_${VER}_${ARCH_DEB}.deb"
}
tools=$(cd "$S" && find usr/bin usr/share/mend -type f | sort)
make_pkg libnccl2-mend "Mend: resilient NCCL-compatible collective communication library" libnccl2 \
  "libc6" usr/lib/libnccl.so.$NCCL_VER usr/lib/libnccl.so.2
make_pkg libnccl-mend-dev "Mend: development files (nccl.h, static library, pkg-config)" libnccl-dev \
  "libnccl2-mend (= $VER)" usr/include/nccl.h usr/lib/libnccl.so usr/lib/libnccl_static.a usr/lib/pkgconfig/nccl.pc
# python3: mend-run, failover_perf and the testbed modules are Python; d2d_bw (built with nvcc)
# links the C++ runtime.
# shellcheck disable=SC2086
make_pkg mend-tools "Mend: mend-info, mend-run, nccl-tests-compatible perf tools, failover_perf" "" \
  "libnccl2-mend (= $VER), python3, libc6, libstdc++6, libgcc-s1" $tools

#!/usr/bin/env bash
# Packaging: the Debian packages and the tarball build and hold the right files.
set -u
cd "$(dirname "$0")/../.."
B=${MEND_BUILDDIR:-build}
# The NCCL version Mend implements (makefiles/version.mk), as in file names: 2.30.7.
VER=$(awk '/^NCCL_(MAJOR|MINOR|PATCH)/ {v = v (v ? "." : "") $3} END {print v}' makefiles/version.mk)
# make install PREFIX=...: library, symlinks, static library, header, pkg-config file, tools.
I=$(mktemp -d); trap 'rm -rf "$I"' EXIT
if out=$(make -s BUILDDIR="$B" PREFIX="$I/usr" install 2>&1); then
  l="$I/usr/lib"
  if [ -f "$l/libnccl.so.$VER" ] && [ "$(readlink "$l/libnccl.so.2")" = libnccl.so.$VER ] \
     && [ "$(readlink "$l/libnccl.so")" = libnccl.so.2 ] && [ -f "$l/libnccl_static.a" ] \
     && [ -f "$I/usr/include/nccl.h" ] && grep -q "^prefix=$I/usr" "$l/pkgconfig/nccl.pc" \
     && grep -q "^Version: $VER" "$l/pkgconfig/nccl.pc" && [ -x "$I/usr/bin/mend-info" ]; then
    echo "ok make_install_layout"
  else
    echo "not ok make_install_layout: $(cd "$I" && find . | sort | tr '\n' ' ')"
  fi
else
  echo "not ok make_install_layout: $out"
fi
command -v dpkg-deb >/dev/null || { echo "ok pkg # SKIP no dpkg-deb"; exit 0; }
out=$(BUILDDIR="$B" bash pkg/debian/build.sh 2>&1) || { echo "not ok pkg_debian_build: $out"; exit 1; }
run=$(echo "$out" | grep 'libnccl2-mend_.*\.deb$'); dev=$(echo "$out" | grep 'libnccl-mend-dev_.*\.deb$')
c=$(dpkg-deb -c "$run")
echo "$c" | grep -q "libnccl.so.$VER\$" && echo "$c" | grep -q 'libnccl.so.2 -> ' && echo "ok pkg_debian_runtime_contents" || echo "not ok pkg_debian_runtime_contents: $c"
dpkg-deb -f "$run" Provides | grep -q 'libnccl2' && echo "ok pkg_debian_provides_libnccl2" || echo "not ok pkg_debian_provides_libnccl2"
d=$(dpkg-deb -c "$dev")
echo "$d" | grep -q 'include/nccl.h$' && echo "$d" | grep -q 'libnccl_static.a$' && echo "$d" | grep -q 'pkgconfig/nccl.pc$' \
  && echo "ok pkg_debian_dev_contents" || echo "not ok pkg_debian_dev_contents: $d"
txz=$(BUILDDIR="$B" bash pkg/txz/build.sh 2>&1 | tail -1)
t=$(tar -tJf "$txz" 2>&1)
echo "$t" | grep -q "lib/libnccl.so.$VER\$" && echo "$t" | grep -q 'include/nccl.h$' && echo "ok pkg_txz_contents" || echo "not ok pkg_txz_contents: $t"

#!/usr/bin/env bash
# Packaging (TAP lines "ok name" / "not ok name"):
#  - make install PREFIX=: layout, nccl.pc; build/lib/pkgconfig/nccl.pc builds a program in the tree
#  - .deb: runtime (the library), -dev and mend-tools (mend-info, mend-run, perf tools) contents,
#    Provides/Conflicts/Replaces NVIDIA's names, nccl.pc's libdir is the multiarch directory
#  - .rpm (where rpmbuild is: Debian's `rpm`): contents, Provides/Conflicts, nccl.pc's libdir (lib64)
#  - tarball contents
#  - clean root (root and debootstrap; the root filesystem is made once under $B/pkg/rootfs):
#    the .deb installed with dpkg into a copy of a clean Debian 12 root, a program compiled
#    against NVIDIA's nccl.h (Mend's where the CUDA toolkit has none) runs there on the installed
#    library, mend-info and mend-run run the installed perf tool; the .rpm installed with
#    `rpm --root --nodeps` into another copy (no Red Hat root here) and the same program run on it;
#    the container image (pkg/container/Dockerfile) built with buildah on a base made from the
#    clean root, and its smoke test run in it; without buildah, the RUN step in a third copy.
set -u
cd "$(dirname "$0")/../.."
B=${MEND_BUILDDIR:-build}
B=$(cd "$B" && pwd)
mkvar() { sed -n "s/^$1 *:= *//p" makefiles/version.mk; }
VER="$(mkvar NCCL_MAJOR).$(mkvar NCCL_MINOR).$(mkvar NCCL_PATCH)"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
ok() { echo "ok $1${2:+ # $2}"; }
nok() { echo "not ok $1"; [ -n "${2:-}" ] && printf '%s\n' "$2" | head -20 | sed 's/^/    /'; }
has() { printf '%s\n' "$1" | grep -qE "$2"; }
TOOLS_RE='bin/(mend-info|mend-run|all_reduce_perf|sendrecv_perf|failover_perf)$'
tools_in() { [ "$(printf '%s\n' "$1" | grep -cE "$TOOLS_RE")" -eq 5 ]; }

# make install PREFIX=...: library, symlinks, static library, header, pkg-config file, tools.
I="$T/inst"
if out=$(make -s BUILDDIR="$B" PREFIX="$I/usr" install 2>&1); then
  l="$I/usr/lib"
  if [ -f "$l/libnccl.so.$VER" ] && [ "$(readlink "$l/libnccl.so.2")" = "libnccl.so.$VER" ] \
     && [ "$(readlink "$l/libnccl.so")" = libnccl.so.2 ] && [ -f "$l/libnccl_static.a" ] \
     && [ -f "$I/usr/include/nccl.h" ] && grep -q "^prefix=$I/usr" "$l/pkgconfig/nccl.pc" \
     && grep -q "^Version: $VER" "$l/pkgconfig/nccl.pc" && [ -x "$I/usr/bin/mend-info" ] \
     && [ -x "$I/usr/bin/mend-run" ] && [ -x "$I/usr/bin/all_reduce_perf" ]; then
    ok make_install_layout
  else
    nok make_install_layout "$(cd "$I" && find . | sort | tr '\n' ' ')"
  fi
else
  nok make_install_layout "$out"
fi

# The build tree's nccl.pc points at the build tree: pkg-config builds and links a program there.
pc="$B/lib/pkgconfig/nccl.pc"
if command -v pkg-config >/dev/null; then
  flags=$(PKG_CONFIG_PATH="$B/lib/pkgconfig" pkg-config --cflags --libs nccl 2>&1)
  if grep -q "^prefix=$B$" "$pc" && gcc -std=c11 tests/abi/abi_probe.c -o "$T/probe_pc" $flags 2>"$T/e"; then
    ok build_tree_pkgconfig "$flags"
  else nok build_tree_pkgconfig "$(head -3 "$pc") $flags $(head -3 "$T/e")"; fi
else ok build_tree_pkgconfig "SKIP no pkg-config"; fi

command -v dpkg-deb >/dev/null || { echo "ok pkg # SKIP no dpkg-deb"; exit 0; }
MA=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
out=$(BUILDDIR="$B" bash pkg/debian/build.sh 2>&1) || { nok pkg_debian_build "$out"; exit 1; }
run=$(echo "$out" | grep 'libnccl2-mend_.*\.deb$'); dev=$(echo "$out" | grep 'libnccl-mend-dev_.*\.deb$')
tls=$(echo "$out" | grep 'mend-tools_.*\.deb$')
c=$(dpkg-deb -c "$run")
has "$c" "usr/lib/$MA/libnccl.so.$VER\$" && has "$c" "usr/lib/$MA/libnccl.so.2 -> " && ! has "$c" 'usr/bin/' \
  && ok pkg_debian_runtime_contents || nok pkg_debian_runtime_contents "$c"
f=$(dpkg-deb -f "$run" Provides Conflicts Replaces Depends)
has "$f" "^Provides: libnccl2 \(= $VER\)" && has "$f" '^Conflicts: libnccl2$' && has "$f" '^Replaces: libnccl2$' \
  && ! has "$f" 'python3' && ok pkg_debian_runtime_relations || nok pkg_debian_runtime_relations "$f"
c=$(dpkg-deb -c "$tls")
tools_in "$c" && has "$c" 'usr/share/mend/testbed.py$' && ! has "$c" 'libnccl' && ok pkg_debian_tools_contents \
  || nok pkg_debian_tools_contents "$c"
f=$(dpkg-deb -f "$tls" Depends Provides)
has "$f" '^Depends: libnccl2-mend \(= .*python3' && ! has "$f" 'Provides' && ok pkg_debian_tools_relations \
  || nok pkg_debian_tools_relations "$f"
d=$(dpkg-deb -c "$dev")
has "$d" 'usr/include/nccl.h$' && has "$d" "usr/lib/$MA/libnccl_static.a\$" && has "$d" "usr/lib/$MA/libnccl.so -> " \
  && has "$d" "usr/lib/$MA/pkgconfig/nccl.pc\$" && ok pkg_debian_dev_contents || nok pkg_debian_dev_contents "$d"
f=$(dpkg-deb -f "$dev" Provides Conflicts Depends)
has "$f" "^Provides: libnccl-dev \(= $VER\)" && has "$f" '^Conflicts: libnccl-dev$' && has "$f" 'Depends: libnccl2-mend \(=' \
  && ok pkg_debian_dev_relations || nok pkg_debian_dev_relations "$f"
dpkg-deb -x "$dev" "$T/devx"
pcd=$(cat "$T/devx/usr/lib/$MA/pkgconfig/nccl.pc")
has "$pcd" "^libdir=\\\$\{prefix\}/lib/$MA\$" && has "$pcd" '^prefix=/usr$' && ok pkg_debian_pc_libdir \
  || nok pkg_debian_pc_libdir "$pcd"

# RPM: built where rpmbuild is (.ci/install-deps installs Debian's rpm).
if command -v rpmbuild >/dev/null; then
  out=$(make -s BUILDDIR="$B" pkg.redhat.build 2>&1)
  rrun=$(echo "$out" | grep -E '/libnccl-mend-[0-9].*\.rpm$'); rdev=$(echo "$out" | grep 'libnccl-mend-devel-.*\.rpm$')
  rtls=$(echo "$out" | grep -E '/mend-tools-[0-9].*\.rpm$')
  if [ -f "$rrun" ] && [ -f "$rdev" ] && [ -f "$rtls" ]; then
    ok pkg_redhat_build
    c=$(rpm -qpl "$rrun" 2>&1)
    has "$c" "^/usr/lib64/libnccl.so.$VER\$" && has "$c" '^/usr/lib64/libnccl.so.2$' && ! has "$c" '^/usr/bin/' \
      && ok pkg_redhat_runtime_contents || nok pkg_redhat_runtime_contents "$c"
    p=$(rpm -qp --provides --conflicts --requires "$rrun" 2>&1)
    has "$p" "^libnccl = $VER\$" && has "$p" '^libnccl$' && ! has "$p" '^python3$' \
      && ok pkg_redhat_runtime_relations || nok pkg_redhat_runtime_relations "$p"
    c=$(rpm -qpl "$rtls" 2>&1); p=$(rpm -qp --requires "$rtls" 2>&1)
    tools_in "$c" && has "$p" '^python3$' && has "$p" '^libnccl-mend = ' && ok pkg_redhat_tools \
      || nok pkg_redhat_tools "$c $p"
    c=$(rpm -qpl "$rdev" 2>&1)
    has "$c" '^/usr/include/nccl.h$' && has "$c" '^/usr/lib64/libnccl_static.a$' && has "$c" '^/usr/lib64/libnccl.so$' \
      && has "$c" '^/usr/lib64/pkgconfig/nccl.pc$' && ok pkg_redhat_devel_contents || nok pkg_redhat_devel_contents "$c"
    p=$(rpm -qp --provides --conflicts "$rdev" 2>&1)
    has "$p" "^libnccl-devel = $VER\$" && has "$p" '^libnccl-devel$' && has "$p" "^pkgconfig\(nccl\) = $VER\$" \
      && ok pkg_redhat_devel_relations || nok pkg_redhat_devel_relations "$p"
    pcr=$(rpm2archive - < "$rdev" | tar -xzO ./usr/lib64/pkgconfig/nccl.pc 2>&1)
    has "$pcr" '^libdir=\$\{prefix\}/lib64$' && ok pkg_redhat_pc_libdir || nok pkg_redhat_pc_libdir "$pcr"
  else
    nok pkg_redhat_build "$out"
  fi
else
  ok pkg_redhat "SKIP no rpmbuild (apt-get install rpm)"
fi

txz=$(BUILDDIR="$B" bash pkg/txz/build.sh 2>&1 | tail -1)
t=$(tar -tJf "$txz" 2>&1)
has "$t" "lib/libnccl.so.$VER\$" && has "$t" 'include/nccl.h$' && tools_in "$t" && ok pkg_txz_contents \
  || nok pkg_txz_contents "$t"

# Clean roots: a minimal Debian 12 (debootstrap, made once and kept under $B/pkg/rootfs).
if [ "$(id -u)" -ne 0 ] || ! command -v debootstrap >/dev/null; then
  ok pkg_clean_root "SKIP needs root and debootstrap"; exit 0
fi
ROOTFS=${MEND_PKG_ROOTFS:-$B/pkg/rootfs}
if [ ! -x "$ROOTFS/usr/bin/python3" ]; then
  rm -rf "$ROOTFS"
  if ! timeout 900 debootstrap --variant=minbase --include=python3 bookworm "$ROOTFS" \
       "${MEND_DEBIAN_MIRROR:-http://deb.debian.org/debian}" > "$T/debootstrap.log" 2>&1; then
    rm -rf "$ROOTFS"; ok pkg_clean_root "SKIP debootstrap failed (no Debian mirror?): $(tail -1 "$T/debootstrap.log")"; exit 0
  fi
fi
# The client: built on NVIDIA's nccl.h where the CUDA toolkit has it, linked against the build's
# libnccl.so (only its soname matters), run inside the root on the installed library.
CUDA=${CUDA_HOME:-/usr/local/cuda}
if [ -f "$CUDA/include/nccl.h" ]; then inc="$CUDA/include"; hdr=NVIDIA; else inc="$B/include"; hdr=Mend; fi
gcc -std=c11 -I"$inc" tests/abi/abi_probe.c -o "$T/probe" -L"$B/lib" -lnccl 2>"$T/e" \
  || { nok pkg_clean_root_client "$(head -3 "$T/e")"; exit 1; }
newroot() { rm -rf "$T/root"; cp -a "$ROOTFS" "$T/root"; cp "$T/probe" "$T/root/usr/local/bin/probe"; }
inroot() { timeout 120 chroot "$T/root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root "$@"; }
probe_in_root() { # name [env...]: the NVIDIA-header client on the installed library
  local n=$1 o rc; shift
  o=$(inroot env LD_BIND_NOW=1 NCCL_DEBUG=VERSION "$@" /usr/local/bin/probe 2>&1); rc=$?
  [ $rc -eq 0 ] && has "$o" "NCCL version $VER-mend" && ! has "$o" '^not ok' && ok "$n" "$hdr nccl.h" \
    || nok "$n" "rc=$rc $o"
}

newroot; cp "$run" "$dev" "$tls" "$T/root/tmp/"
o=$(inroot sh -c 'dpkg -i /tmp/*.deb' 2>&1) && ok pkg_debian_installs_in_clean_root || nok pkg_debian_installs_in_clean_root "$o"
probe_in_root pkg_debian_clean_root_client
o=$(inroot ldconfig -p | grep 'libnccl.so.2 ')
has "$o" "=> (/usr)?/lib/$MA/libnccl.so.2\$" && ok pkg_debian_ldconfig || nok pkg_debian_ldconfig "$o"
o=$(inroot sh -c 'mend-info --params | grep -c "^NCCL_\|^MEND_"; mend-run -np 2 all_reduce_perf -b 8 -e 1K -f 4 -c 1' 2>&1)
has "$o" 'Out of bounds values : 0 OK' && ok pkg_debian_tools_in_clean_root || nok pkg_debian_tools_in_clean_root "$o"

if command -v rpm >/dev/null && [ -f "${rrun:-}" ]; then
  newroot
  o=$(rpm --root "$T/root" --dbpath /var/lib/rpm --nodeps -i "$rrun" "$rdev" "$rtls" 2>&1) \
    && ok pkg_redhat_installs_in_clean_root "rpm --root --nodeps into a Debian root" \
    || nok pkg_redhat_installs_in_clean_root "$o"
  probe_in_root pkg_redhat_clean_root_client LD_LIBRARY_PATH=/usr/lib64
fi

# The container image: built with buildah (daemonless, vfs storage, chroot isolation) on a base
# made from the clean root, as `debian:12-slim` (no registry is reachable), and the smoke test run
# in it.  Without buildah: the recipe's RUN step in a clean root.  apt-get update needs the mirror.
container_smoke='mend-run -np 2 all_reduce_perf -b 8 -e 64 -c 1'
if command -v buildah >/dev/null; then
  export STORAGE_DRIVER=vfs BUILDAH_ISOLATION=chroot
  img="localhost/mend-test-$$"; base="localhost/mend-test-base-$$"; ctrs=()
  newroot; rm -f "$T/root/usr/local/bin/probe"; cp /etc/resolv.conf "$T/root/etc/resolv.conf" 2>/dev/null
  cp "$run" "$dev" "$tls" "$T/"
  o=$(buildah from --name "mend-test-base-$$" scratch 2>&1) && ctrs+=("mend-test-base-$$") \
    && o=$(buildah copy --quiet "mend-test-base-$$" "$T/root/" / 2>&1 && buildah commit --quiet "mend-test-base-$$" "$base" 2>&1 \
           && timeout 600 buildah bud --quiet --pull=never --from "$base" -t "$img" -f pkg/container/Dockerfile "$T" 2>&1)
  if [ $? -eq 0 ]; then
    o=$(buildah from --name "mend-test-$$" --pull=never "$img" 2>&1) && ctrs+=("mend-test-$$") \
      && o=$(timeout 120 buildah run "mend-test-$$" -- sh -c "$container_smoke" 2>&1)
    has "$o" "NCCL version $VER-mend" && has "$o" 'Out of bounds values : 0 OK' \
      && ok pkg_container_image "built with buildah, smoke test in the image" || nok pkg_container_image "$o"
  elif has "$o" 'Temporary failure|Could not resolve|Failed to fetch'; then
    ok pkg_container_image "SKIP no Debian mirror: $(printf '%s\n' "$o" | tail -1)"
  else
    nok pkg_container_image "$o"
  fi
  buildah rm "${ctrs[@]}" >/dev/null 2>&1; buildah rmi -f "$img" "$base" >/dev/null 2>&1
  exit 0
fi
# The container recipe: its COPY and RUN steps in a clean root (what debian:12-slim holds), then
# its ENV and a smoke test.  apt-get update inside needs the Debian mirror.
newroot; cp "$run" "$dev" "$tls" "$T/root/tmp/"; cp /etc/resolv.conf "$T/root/etc/resolv.conf" 2>/dev/null
steps=$(sed -n 's/^RUN //p' pkg/container/Dockerfile)
envs=$(sed -n 's/^ENV //p' pkg/container/Dockerfile)
o=$(inroot sh -ec "export DEBIAN_FRONTEND=noninteractive; $steps" 2>&1)
if [ $? -eq 0 ]; then
  o=$(inroot env $envs sh -c "$container_smoke" 2>&1)
  has "$o" "NCCL version $VER-mend" && has "$o" 'Out of bounds values : 0 OK' \
    && ok pkg_container_recipe_in_chroot "RUN steps in a clean Debian 12 root, not an image build" \
    || nok pkg_container_recipe_in_chroot "$o"
elif has "$o" 'Temporary failure|Could not resolve|Failed to fetch'; then
  ok pkg_container_recipe_in_chroot "SKIP no Debian mirror: $(printf '%s\n' "$o" | tail -1)"
else
  nok pkg_container_recipe_in_chroot "$o"
fi

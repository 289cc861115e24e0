#!/usr/bin/env bash
# RPM packages (needs rpmbuild: Debian's `rpm` package provides it).
source "$(dirname "$0")/../common.sh"
command -v rpmbuild >/dev/null || { echo "rpmbuild not found (apt-get install rpm)"; exit 77; }
S="$PKGDIR/redhat/stage"; rm -rf "$S" "$PKGDIR/redhat/rpmbuild"; stage "$S" /usr
mv "$S/usr/lib" "$S/usr/lib64"
sed -i "s|^libdir=.*|libdir=\${prefix}/lib64|" "$S/usr/lib64/pkgconfig/nccl.pc"   # where the files are
sed -e "s|@NCCL_VER@|$NCCL_VER|g" -e "s|@PKG_REV@|$PKG_REV|g" -e "s|@MEND_VER@|$MEND_VER|g" -e "s|@STAGE@|$S|g" \
  "$TOP/pkg/redhat/mend.spec.in" > "$PKGDIR/redhat/mend.spec"
rpmbuild -bb --quiet --define "_topdir $PKGDIR/redhat/rpmbuild" --define "_build_id_links none" \
  "$PKGDIR/redhat/mend.spec" && find "$PKGDIR/redhat/rpmbuild/RPMS" -name '*.rpm'

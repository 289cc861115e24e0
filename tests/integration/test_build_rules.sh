#!/usr/bin/env bash
# Build rules: every program linked with -lnccl is made after the unversioned libnccl.so link, the
# file -lnccl resolves to.  A rule that depends only on libnccl.so.2 builds in a serial make but
# fails now and then under make -j2 with "cannot find -lnccl".  Each program's own rule is dry-run
# (make -n) into an empty BUILDDIR, so only its prerequisites decide the order.
set -u
cd "$(dirname "$0")/../.."
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
B="$T/b"
ok() { echo "ok $1"; }
nok() { echo "not ok $1: $2"; }

targets=()
for f in tests/integration/*.c; do targets+=("$B/tests/$(basename "$f" .c)"); done
for f in tests/gpu/test_*.c; do [ -f "$f" ] && targets+=("$B/tests/gpu/$(basename "$f" .c)"); done
for f in benchmarks/*.c; do
  [ "$(basename "$f")" = d2d_bw.c ] || targets+=("$B/bin/$(basename "$f" .c)")
done

checked=0
for t in "${targets[@]}"; do
  name="links_after_libnccl_so_${t#"$B/"}"; name=${name//\//_}
  if ! make -n BUILDDIR="$B" "$t" > "$T/plan" 2> "$T/err"; then
    nok "$name" "make -n failed: $(head -3 "$T/err" | tr '\n' ' ')"
    continue
  fi
  link=$(grep -n -- '-lnccl' "$T/plan" | head -1 | cut -d: -f1)
  [ -n "$link" ] || continue  # does not link the shared library
  so=$(grep -n -E "^ln -sf [^ ]+ $B/lib/libnccl\.so$" "$T/plan" | head -1 | cut -d: -f1)
  checked=$((checked + 1))
  if [ -n "$so" ] && [ "$so" -lt "$link" ]; then ok "$name"
  else nok "$name" "links -lnccl (line $link of make -n) without $B/lib/libnccl.so among its prerequisites"; fi
done
[ "$checked" -gt 0 ] && ok "build_rules_checked_$checked" || nok build_rules_checked "no program links -lnccl"

#!/usr/bin/env bash
# ABI tests: (1) Mend's header compiles as C and C++ with NCCL 2.30's layouts; (2) Mend exports a superset
# of NVIDIA's libnccl.so.2 symbols and every function of the 2.29/2.30 delta, ncclX weak + pncclX strong,
# nothing else, no symbol versions; (3) a program compiled against NVIDIA's nccl.h (CUDA toolkit, 2.28)
# and the same program compiled against Mend's nccl.h (2.30) run against Mend's library.
set -u
cd "$(dirname "$0")/../.."
B=${MEND_BUILDDIR:-build}
VER=$(awk '/^NCCL_(MAJOR|MINOR|PATCH)/ {v = v (v ? "." : "") $3} END {print v}' makefiles/version.mk)
CUDA=${CUDA_HOME:-/usr/local/cuda}
LIB="$B/lib/libnccl.so.2"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
ok() { echo "ok $1"; }
nok() { echo "not ok $1: $2"; }

if gcc -std=c11 -Wall -Wextra -Werror -pedantic -I"$B/include" tests/abi/header_check.c -o "$T/hc" 2>"$T/e" && "$T/hc"; then
  ok header_compiles_as_c11; else nok header_compiles_as_c11 "$(head -3 "$T/e")"; fi
if g++ -std=c++17 -Wall -Wextra -Werror -x c++ -I"$B/include" tests/abi/header_check.c -o "$T/hcpp" 2>"$T/e" && "$T/hcpp"; then
  ok header_compiles_as_cxx17; else nok header_compiles_as_cxx17 "$(head -3 "$T/e")"; fi

nm -D --defined-only "$LIB" | awk '{print $2, $3}' | sort -k2 > "$T/ours"
bad=$(awk '$2 !~ /^p?nccl/' "$T/ours" | head -5)
[ -z "$bad" ] && ok exports_only_nccl_names || nok exports_only_nccl_names "$bad"
weak=$(awk '$2 ~ /^nccl/ && $1 != "W" && $2 != "ncclResetDebugInitInternal"' "$T/ours" | head -5)
[ -z "$weak" ] && ok nccl_symbols_are_weak || nok nccl_symbols_are_weak "$weak"
strong=$(awk '$2 ~ /^pnccl/ && $1 != "T"' "$T/ours" | head -5)
[ -z "$strong" ] && ok pnccl_symbols_are_strong || nok pnccl_symbols_are_strong "$strong"
missing_p=$(awk '$2 ~ /^nccl/ && $2 != "ncclResetDebugInitInternal" {print "p"$2}' "$T/ours" | while read -r s; do grep -q " $s$" "$T/ours" || echo "$s"; done | head -5)
[ -z "$missing_p" ] && ok every_nccl_has_pnccl_twin || nok every_nccl_has_pnccl_twin "$missing_p"
if readelf -V "$LIB" | grep -q 'Version definition'; then nok no_symbol_versions "found .gnu.version_d"; else ok no_symbol_versions; fi
soname=$(readelf -d "$LIB" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = libnccl.so.2 ] && ok soname_is_libnccl_so_2 || nok soname_is_libnccl_so_2 "$soname"
# Host mode needs no GPU and no CUDA driver: nothing CUDA is linked (this machine may have neither).
cuda_needed=$(readelf -d "$LIB" | grep NEEDED | grep -Ei 'cuda|nvidia|nvml' | head -3)
[ -z "$cuda_needed" ] && ok no_cuda_library_needed || nok no_cuda_library_needed "$cuda_needed"
# The functions NCCL 2.29 and 2.30 add (shared/abi/NCCL_2.30_DELTA.md), each as ncclX and pncclX.
DELTA="ncclCommGetUniqueId ncclCommGrow ncclCommSuspend ncclCommResume ncclCommMemStats ncclWinGetUserPtr
  ncclPutSignal ncclSignal ncclWaitSignal ncclParamBind ncclParamGetI8 ncclParamGetI16 ncclParamGetI32
  ncclParamGetI64 ncclParamGetU8 ncclParamGetU16 ncclParamGetU32 ncclParamGetU64 ncclParamGetStr ncclParamGet
  ncclParamGetParameter ncclParamGetAllParameterKeys ncclParamDumpAll"
nodelta=$(for f in $DELTA; do for s in "$f" "p$f"; do grep -q " $s$" "$T/ours" || echo "$s"; done; done | head -5)
[ -z "$nodelta" ] && ok delta_2_30_functions_$(echo $DELTA | wc -w)_exported || nok delta_2_30_functions_exported "$nodelta"
# Every function Mend's own header declares is exported, and every exported pair is declared.
grep -oE 'MEND_DECLARE\([^,]+, *nccl[A-Za-z0-9]+' "$B/include/nccl.h" | sed -E 's/.*, *//' | sort -u > "$T/ourh"
undecl=$(while read -r f; do for s in "$f" "p$f"; do grep -q " $s$" "$T/ours" || echo "$s"; done; done < "$T/ourh" | head -5)
[ -s "$T/ourh" ] && [ -z "$undecl" ] && ok mend_header_functions_$(wc -l < "$T/ourh")_exported \
  || nok mend_header_functions_exported "${undecl:-no functions found}"
for f in $DELTA; do grep -qx "$f" "$T/ourh" || echo "$f"; done > "$T/nodecl"
[ ! -s "$T/nodecl" ] && ok delta_2_30_functions_declared || nok delta_2_30_functions_declared "$(head -5 "$T/nodecl" | tr '\n' ' ')"
# The same probe built on Mend's own header (2.30 layout, 96-byte config, the new entry points).
if gcc -std=c11 -Wall -Werror -I"$B/include" tests/abi/abi_probe.c -o "$T/probe230" -L"$B/lib" -lnccl 2>"$T/e"; then
  ok mend_header_program_builds
  out=$(LD_BIND_NOW=1 LD_LIBRARY_PATH="$B/lib" timeout 60 "$T/probe230" 2>&1); rc=$?
  echo "$out" | grep -E '^(ok|not ok) ' | sed -E 's/^(ok|not ok) /\1 mend_header_/'
  [ $rc -eq 0 ] && ok mend_header_probe_exit_code || nok mend_header_probe_exit_code "rc=$rc"
else
  nok mend_header_program_builds "$(head -3 "$T/e")"
fi

if [ -f "$B/lib/libnccl_static.a" ] && [ -f "$B/lib/pkgconfig/nccl.pc" ] && [ -L "$B/lib/libnccl.so" ]; then
  ok build_layout; else nok build_layout "missing static lib, pkg-config file or symlink"; fi

NV_LIB="$CUDA/lib64/libnccl.so.2"; NV_H="$CUDA/include/nccl.h"
if [ ! -f "$NV_LIB" ] || [ ! -f "$NV_H" ]; then
  echo "ok nvidia_superset # SKIP no NVIDIA NCCL in $CUDA"; echo "ok nvidia_header_program # SKIP"; exit 0
fi
nm -D --defined-only "$NV_LIB" | awk '$3 ~ /^p?nccl/ {print $3}' | sort -u > "$T/nv"
missing=$(awk '{print $2}' "$T/ours" | sort -u | comm -23 "$T/nv" - | head -10 | tr '\n' ' ')
[ -z "$missing" ] && ok nvidia_superset_$(wc -l < "$T/nv")_symbols || nok nvidia_superset "missing: $missing"
# Every function NVIDIA's header declares (and its pnccl twin) is exported.
grep -oE '(ncclResult_t|char[[:space:]]*\*|void)[[:space:]]+p?nccl[A-Z][A-Za-z0-9]*[[:space:]]*\(' "$NV_H" \
  | sed -E 's/.*[[:space:]]p?(nccl[A-Za-z0-9]*)[[:space:]]*\($/\1/' | sort -u > "$T/nvh"
undeclared=$(while read -r f; do for s in "$f" "p$f"; do grep -q " $s$" "$T/ours" || echo "$s"; done; done < "$T/nvh" | head -5)
[ -s "$T/nvh" ] && [ -z "$undeclared" ] && ok nvidia_header_functions_$(wc -l < "$T/nvh")_exported \
  || nok nvidia_header_functions_exported "${undeclared:-no functions found in $NV_H}"

# Build against NVIDIA's header, link and run against Mend's library.
if gcc -std=c11 -I"$CUDA/include" tests/abi/abi_probe.c -o "$T/probe" -L"$B/lib" -lnccl 2>"$T/e"; then
  ok nvidia_header_program_builds
  # LD_BIND_NOW: every symbol the program references resolves at load time, against Mend.
  out=$(cd "$T" && LD_BIND_NOW=1 NCCL_DEBUG=VERSION LD_LIBRARY_PATH="$(cd "$OLDPWD" && cd "$B/lib" && pwd)" timeout 60 ./probe 2>&1); rc=$?
  echo "$out" | grep -E '^(ok|not ok) '
  lddout=$(LD_LIBRARY_PATH="$B/lib" ldd "$T/probe" | grep libnccl)
  case "$lddout" in *"$B/lib/libnccl.so.2"*) ok probe_loads_mend_library;; *) nok probe_loads_mend_library "$lddout";; esac
  echo "$out" | grep -qF "NCCL version $VER-mend" && ok banner_names_mend || nok banner_names_mend "no '$VER-mend' banner at NCCL_DEBUG=VERSION"
  [ $rc -eq 0 ] && ok probe_exit_code || nok probe_exit_code "rc=$rc"
else
  nok nvidia_header_program_builds "$(head -3 "$T/e")"
fi

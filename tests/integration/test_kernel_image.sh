#!/usr/bin/env bash
# The CUDA kernel inside libnccl.so.2 (what a GPU machine loads): machine code for sm_80 and sm_90
# and compute_90 PTX (the default NVCC_GENCODE) in the .nv_fatbin section cuobjdump reads; the
# build's ptxas report shows no spill; the library links no CUDA library (the driver is dlopened)
# and, without a driver, runs in host mode.  Skips (77) in a build without nvcc.
set -u
cd "$(dirname "$0")/../.."
B=${MEND_BUILDDIR:-build}
LIB="$B/lib/libnccl.so.2"
LOG="$B/obj/src/device/kernel.fatbin.log"
ok() { echo "ok $1"; }
nok() { echo "not ok $1: $2"; }
if [ ! -f "$LOG" ]; then echo "# skip: this build has no CUDA kernels (no nvcc)"; exit 77; fi
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT

python3 src/device/embed_fatbin.py --list "$LIB" > "$T/images" 2>&1
for img in "elf sm_80" "elf sm_90" "ptx compute_90"; do
  grep -qx "$img" "$T/images" && ok "kernel_image_${img// /_}" || nok "kernel_image_${img// /_}" "$(tr '\n' ' ' < "$T/images")"
done
readelf -S "$LIB" | grep -q '\.nv_fatbin' && ok kernel_image_section || nok kernel_image_section "no .nv_fatbin section"
python3 src/device/embed_fatbin.py --check-ptxas "$LOG" > "$T/ptxas" 2>&1 \
  && grep -q "spill stores 0 B" "$T/ptxas" && ok kernel_no_spills || nok kernel_no_spills "$(tr '\n' ' ' < "$T/ptxas")"
deps=$(readelf -d "$LIB" | grep NEEDED | grep -ci 'cuda')
[ "$deps" -eq 0 ] && ok kernel_no_cuda_link || nok kernel_no_cuda_link "$(readelf -d "$LIB" | grep NEEDED)"
# No driver here (or MEND_CUDA_DISABLE=1): a communicator runs in host mode and says so.
MEND_CUDA_DISABLE=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT "$B/tests/test_threads" > "$T/threads" 2>&1
grep -q "host executor" "$T/threads" && ok kernel_host_mode_without_cuda \
  || nok kernel_host_mode_without_cuda "$(grep -m3 -E 'WARN|executor' "$T/threads")"

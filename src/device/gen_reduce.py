#!/usr/bin/env python3
"""Print gen_reduce.h: one small loop per (datatype, reduction kind) and the dispatch tables.

The element arithmetic lives in dtypes.h (mendSumF32, mendDivI8, ...); this script only writes
the loops around it so that every loop body is a straight call the compiler can inline and
vectorize.  The narrow floats (bf16, fp8) get two more copies of their loops, compiled for AVX2 with F16C
(`...V3`, MEND_RED_V3_TARGET) and for AVX-512 (`...V4`), where the branch-free conversions vectorize 8
and 16 lanes wide; half's V3 and V4 loops are written by hand with F16C (reduce_x86_v3.h,
reduce_x86.h), and so are bf16's sum, product and PreMulSum and every fp8 loop but SumPostDiv: tables
of results in the baseline (reduce_fp8.h), vector lanes through half precision in V3 and V4
(reduce_x86_v3.h, reduce_x86_fp8.h).  Three tables per entry point: the baseline one, the V3 one
and the V4 one, which reduce.c picks at run time from the CPU.  Included once, by
src/device/reduce.c.
"""

# (tag, ncclDataType_t name, storage type)
TYPES = [
    ("I8", "ncclInt8", "int8_t"), ("U8", "ncclUint8", "uint8_t"),
    ("I32", "ncclInt32", "int32_t"), ("U32", "ncclUint32", "uint32_t"),
    ("I64", "ncclInt64", "int64_t"), ("U64", "ncclUint64", "uint64_t"),
    ("F16", "ncclFloat16", "uint16_t"), ("F32", "ncclFloat32", "float"),
    ("F64", "ncclFloat64", "double"), ("Bf16", "ncclBfloat16", "uint16_t"),
    ("E4m3", "ncclFloat8e4m3", "uint8_t"), ("E5m2", "ncclFloat8e5m2", "uint8_t"),
]
NARROW_V4 = ["Bf16", "E4m3", "E5m2"]  # generated V4 copies (F16's are hand-written)
NARROW = ["F16"] + NARROW_V4
# Loops written by hand: baseline ones in reduce_fp8.h (a 64 Ki-entry table of results), V4 ones in
# reduce_x86_fp8.h.
HAND = {(t, f) for t in ("E4m3", "E5m2") for f in ("redSum", "redProd", "redPreMulSum", "copyPreMul")}
# V4 loops written by hand in reduce_x86_fp8.h on top of those (the baseline ones are generated); the V3
# set (reduce_x86_v3.h) writes the same ones by hand.
HAND_V4 = {(t, f) for t in ("E4m3", "E5m2") for f in ("redMax", "redMin")} | {
    ("Bf16", f) for f in ("redSum", "redProd", "redPreMulSum", "copyPreMul")}  # reduce_x86_bf16.h
ISA = {"V3": "AVX2 with F16C", "V4": "AVX-512"}
SIMPLE = [("Sum", "MEND_RED_SUM"), ("Prod", "MEND_RED_PROD"), ("Max", "MEND_RED_MAX"), ("Min", "MEND_RED_MIN")]

LOOP = "for (size_t i = 0; i < n; i++) "


def emit_type(t, enum, c, v=""):
    """Loops of type t; v = "V3" or "V4": the AVX2 or AVX-512 copy (same source, another target)."""
    u = "mendU" + t  # element type with alignment 1: chunk pointers need not be aligned
    a = f"MEND_RED_{v}_TARGET " if v else ""
    if not v:
        print(f"/* ---- {enum} ---- */\ntypedef {c} {u} __attribute__((aligned(1)));")
    else:
        print(f"/* ---- {enum}, {ISA[v]} ---- */")
    for op, _ in SIMPLE:
        if (t, "red" + op) not in HAND and not (v and (t, "red" + op) in HAND_V4):
            print(f"{a}static void red{op}{t}{v}(RED_PARAMS) {{ RED_PTRS({u}); {LOOP}d[i] = mend{op}{t}(a[i], b[i]); }}")
    if (t, "redPreMulSum") not in HAND and not (v and (t, "redPreMulSum") in HAND_V4):
        print(f"{a}static void redPreMulSum{t}{v}(RED_PARAMS) {{\n  RED_PTRS({u});\n"
              f"  if (!(flags & MEND_RED_PREOP)) {{ {LOOP}d[i] = mendSum{t}(a[i], b[i]); return; }}\n"
              f"  {c} s; redScalar(op, &s, sizeof s);\n"
              f"  {LOOP}d[i] = mendSum{t}(mendProd{t}(a[i], s), b[i]);\n}}")
    print(f"{a}static void redSumPostDiv{t}{v}(RED_PARAMS) {{\n  RED_PTRS({u});\n"
          f"  if (!(flags & MEND_RED_POSTOP)) {{ {LOOP}d[i] = mendSum{t}(a[i], b[i]); return; }}\n"
          f"  {LOOP}d[i] = mendDiv{t}(mendSum{t}(a[i], b[i]), (uint32_t)op->nRanks);\n}}")
    if not v:
        print(f"static void copyPlain{t}(COPY_PARAMS) {{ copyPlain(dst, x, n * sizeof({c})); }}")
    if (t, "copyPreMul") not in HAND and not (v and (t, "copyPreMul") in HAND_V4):
        print(f"{a}static void copyPreMul{t}{v}(COPY_PARAMS) {{\n  COPY_PTRS({u});\n"
              f"  if (!(flags & MEND_RED_PREOP)) {{ copyPlain(dst, x, n * sizeof({c})); return; }}\n"
              f"  {c} s; redScalar(op, &s, sizeof s);\n"
              f"  {LOOP}d[i] = mendProd{t}(a[i], s);\n}}")
    print(f"{a}static void copyPostDiv{t}{v}(COPY_PARAMS) {{\n  COPY_PTRS({u});\n"
          f"  if (!(flags & MEND_RED_POSTOP)) {{ copyPlain(dst, x, n * sizeof({c})); return; }}\n"
          f"  {LOOP}d[i] = mendDiv{t}(a[i], (uint32_t)op->nRanks);\n}}\n")


def emit_tables(v=""):
    """The dispatch tables; v = "V3"/"V4": the narrow floats' entries point at their AVX2/AVX-512 loops."""
    vv = lambda t, f: v if t in NARROW else ""
    isa = f", {ISA[v]}" if v else ""
    print(f"/* mendReduce: [datatype][kind]{isa}. */")
    print(f"static const mendRedFn redTable{v}[ncclNumTypes][MEND_RED_NKINDS] = {{")
    for t, enum, _ in TYPES:
        row = ", ".join(f"[{k}] = red{op}{t}{vv(t, 'red' + op)}" for op, k in SIMPLE)
        print(f"  [{enum}] = {{{row},\n"
              f"    [MEND_RED_PREMULSUM] = redPreMulSum{t}{vv(t, 'redPreMulSum')}, "
              f"[MEND_RED_SUM_POSTDIV] = redSumPostDiv{t}{vv(t, 'redSumPostDiv')}}},")
    print("};\n")
    print(f"/* mendReduceCopy: [datatype][kind]{isa}; sum/prod/max/min copy bytes. */")
    print(f"static const mendRedCopyFn copyTable{v}[ncclNumTypes][MEND_RED_NKINDS] = {{")
    for t, enum, _ in TYPES:
        row = ", ".join(f"[{k}] = copyPlain{t}" for _, k in SIMPLE)
        print(f"  [{enum}] = {{{row},\n"
              f"    [MEND_RED_PREMULSUM] = copyPreMul{t}{vv(t, 'copyPreMul')}, "
              f"[MEND_RED_SUM_POSTDIV] = copyPostDiv{t}{vv(t, 'copyPostDiv')}}},")
    print("};\n")


def main():
    print("/* Generated by src/device/gen_reduce.py: do not edit.  Included by src/device/reduce.c,")
    print(" * which defines RED_PARAMS, RED_PTRS, COPY_PARAMS, COPY_PTRS, redScalar(), copyPlain() and,")
    print(" * where MEND_RED_V3 / MEND_RED_V4 is 1, MEND_RED_V3_TARGET / MEND_RED_V4_TARGET and the hand-written")
    print(" * loops of that set (reduce_x86_v3.h; reduce_x86.h, reduce_x86_fp8.h, reduce_x86_bf16.h). */")
    print("#ifndef MEND_GEN_REDUCE_H_\n#define MEND_GEN_REDUCE_H_\n")
    for t, enum, c in TYPES:
        emit_type(t, enum, c)
    emit_tables()
    for v in ("V3", "V4"):
        print(f"#if MEND_RED_{v}")
        for t, enum, c in TYPES:
            if t in NARROW_V4:
                emit_type(t, enum, c, v)
        emit_tables(v)
        print("#endif\n")
    print("#endif")


if __name__ == "__main__":
    main()

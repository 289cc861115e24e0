"""Python binding of SPARe's reordering controller (libmendspare.so, sim/spare/README.md).

    import spare
    stk = spare.layout_cyclic(7, 3)                 # list of N rows of r types
    out = spare.control(stk, failed={1, 2}, s=1)    # {'outcome', 's', 'moves', 'stacks'}

Bad input raises ValueError with the library's message.  The library is found in
$MEND_BUILDDIR/lib, else in build/lib of this checkout.
"""
import ctypes
import os

OUTCOMES = ("keep", "reorder", "wipeout")
_lib = None


def _load():
    global _lib
    if _lib is not None:
        return _lib
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(os.environ.get("MEND_BUILDDIR") or os.path.join(here, "..", "..", "build"), "lib",
                        "libmendspare.so")
    lib = ctypes.CDLL(path)
    ip, bp, i = ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_ubyte), ctypes.c_int
    for name, args in (("mendSpareLayoutCyclic", [i, i, ip, ip]), ("mendSpareLayoutReplica", [i, i, ip]),
                       ("mendSpareFixed", [i, i, ip, bp, i, ip]), ("mendSpareFree", [i, i, ip, bp, i, ip]),
                       ("mendSpareMinStack", [i, i, ip, bp, i, ip]), ("mendSpareReorder", [i, i, ip, bp, i, ip]),
                       ("mendSpareControl", [i, i, ip, bp, ip, ip, ip])):
        getattr(lib, name).argtypes = args
        getattr(lib, name).restype = ctypes.c_int
    lib.mendSpareLastError.restype = ctypes.c_char_p
    _lib = lib
    return lib


def _check(res):
    if res != 0:
        raise ValueError(_load().mendSpareLastError().decode())


def _table(stk):
    n = len(stk)
    r = len(stk[0]) if n else 0
    if any(len(row) != r for row in stk):
        raise ValueError("every group needs the same number of stacks (r)")
    flat = (ctypes.c_int * max(1, n * r))(*[x for row in stk for x in row])
    return n, r, flat


def _rows(flat, n, r):
    return [list(flat[w * r:(w + 1) * r]) for w in range(n)]


def _failed(n, failed):
    arr = (ctypes.c_ubyte * max(1, n))()
    for w in failed:
        if not 0 <= w < n:
            raise ValueError(f"failed group {w}: must be an index in [0, {n})")
        arr[w] = 1
    return arr


def layout_cyclic(n, r):
    flat = (ctypes.c_int * max(1, n * r))()
    _check(_load().mendSpareLayoutCyclic(n, r, None, flat))
    return _rows(flat, n, r)


def layout_replica(n, r):
    flat = (ctypes.c_int * max(1, n * r))()
    _check(_load().mendSpareLayoutReplica(n, r, flat))
    return _rows(flat, n, r)


def _predicate(fn, stk, failed, s):
    n, r, flat = _table(stk)
    out = ctypes.c_int(0)
    _check(fn(n, r, flat, _failed(n, failed), s, ctypes.byref(out)))
    return out.value


def fixed(stk, failed, s):
    """Phase 0: do the committed stacks cover every type within s stacks?"""
    return bool(_predicate(_load().mendSpareFixed, stk, failed, s))


def free(stk, failed, s):
    """HK-Free: does some reordering cover every type within s stacks?"""
    return bool(_predicate(_load().mendSpareFree, stk, failed, s))


def min_stack(stk, failed, start=1):
    """Phase 1: the least all-reduce stack from `start`, or 0 on a wipe-out."""
    return _predicate(_load().mendSpareMinStack, stk, failed, start)


def reorder(stk, failed, s):
    """Phase 2: (new stacks, moves) covering every type within s stacks."""
    n, r, flat = _table(stk)
    moves = ctypes.c_int(0)
    _check(_load().mendSpareReorder(n, r, flat, _failed(n, failed), s, ctypes.byref(moves)))
    return _rows(flat, n, r), moves.value


def control(stk, failed, s=1):
    """The whole controller: {'outcome': keep|reorder|wipeout, 's', 'moves', 'stacks'}."""
    n, r, flat = _table(stk)
    cs, outcome, moves = ctypes.c_int(s), ctypes.c_int(0), ctypes.c_int(0)
    _check(_load().mendSpareControl(n, r, flat, _failed(n, failed), ctypes.byref(cs), ctypes.byref(outcome),
                                    ctypes.byref(moves)))
    return {"outcome": OUTCOMES[outcome.value], "s": cs.value if outcome.value != 2 else 0,
            "moves": moves.value, "stacks": _rows(flat, n, r)}

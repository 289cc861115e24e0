// Mend's internal headers for the C++ unit tests.  They are C11 with _Atomic fields, which C++17
// lacks: they are read here with plain (volatile) types of the same size and layout, and the inline
// functions in them use the __atomic builtins.  Include this instead of the headers themselves.
#ifndef MEND_TESTS_UNIT_MEND_INTERNAL_H_
#define MEND_TESTS_UNIT_MEND_INTERNAL_H_

#define _Atomic volatile
#define atomic_load_explicit(p, mo) __atomic_load_n((p), (mo))
#define memory_order_acquire __ATOMIC_ACQUIRE
#define atomic_fetch_add_explicit(p, v, mo) __atomic_fetch_add((p), (v), (mo))
#define memory_order_acq_rel __ATOMIC_ACQ_REL
extern "C" {
#include "bootstrap.h"
#include "bootstrap_priv.h"
#include "comm.h"
#include "graph/graph.h"
#include "init.h"
#include "misc/bell.h"
#include "misc/param.h"
#include "misc/socket.h"
#include "misc/utils.h"
#include "transport/transport.h"
}
#undef atomic_load_explicit
#undef memory_order_acquire
#undef atomic_fetch_add_explicit
#undef memory_order_acq_rel
#undef _Atomic

#endif

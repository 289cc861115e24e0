/*
 * What the resilience service reads from other ranks, checked by pure functions before anything in
 * it is believed: the out-of-band messages (over the bootstrap) and the connection notices they
 * carry.  The service (resil.c, rnet_notice.c) and the fuzz target (tests/fuzz/fuzz_resil.c) call
 * the same functions.  A health update's own fields are checked by mendHealthApply (health.c).
 */
#ifndef MEND_RESILIENCE_RESIL_WIRE_H_
#define MEND_RESILIENCE_RESIL_WIRE_H_

#include <stddef.h>

#include "resilience/resil_priv.h"

/* An out-of-band message that rank `from` sent to rank `rank`: 1 when it is one (length, magic, and
 * for the types checked here the fields of its type in range; other types are their handler's to
 * check); *out is a copy whose strings are terminated.  0 otherwise, WARNed (rate-limited). */
int mendResilMsgParse(const void* buf, size_t len, int rank, int from, struct resilMsg* out);
/* A relay request (relay.h): mendRelayMsgCheck, defined with the checks here. */
/* A notice from the other end of a connection: 1 when it is one (magic, a type an end may send);
 * *out is a copy marked remote (a peer cannot pass its notice for a local detector's). */
int mendRnetNoticeParse(const void* buf, size_t len, struct rnetNotice* out);

#endif

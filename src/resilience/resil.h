/*
 * The resilience service of one communicator (comm->resil): what the resilient net needs beyond its
 * own connections.  It owns
 *   - a probe listener on every local NIC (a peer's probe is a TCP connect to it over one NIC pair;
 *     the kernel answers it even when this process is stopped),
 *   - every rank's probe addresses (allgathered at init),
 *   - a link monitor (netlink: a NIC going down or losing its carrier fences its paths at once),
 *   - probes: confirming progress timeouts, watching dead paths until they are healthy again
 *     (fail-back), and three-point probes for fault localization,
 *   - out-of-band messages over the bootstrap: notices between the ends of a connection (reliable,
 *     acknowledged), localization requests and answers, health broadcasts,
 *   - the health registry (health.h).
 * Two threads: the service loop (poll on netlink, probe sockets and a wake-up eventfd) and the
 * out-of-band receiver (blocked on the bootstrap).
 */
#ifndef MEND_RESILIENCE_RESIL_H_
#define MEND_RESILIENCE_RESIL_H_

#include <stdint.h>

#include "nccl.h"
#include "misc/bell.h"
#include "transport/net.h"

struct ncclComm;
struct mendResil;
struct rnetCtx;
struct rnetComm;
struct rnetNotice;

/* Collective over comm (every rank calls it when the resilient net is on): listeners, allgather of
 * probe addresses, link monitor, threads.  `base` is the Net under the resilient one; `wake` is rung
 * when a connection has something new to apply (the proxy's bell). */
ncclResult_t mendResilCreate(struct ncclComm* comm, const mendNet_t* base, mendBell_t* wake, struct mendResil** out);
/* The resilient net's context whose connections the service watches. */
void mendResilAttach(struct mendResil* r, struct rnetCtx* ctx);
/* Stop the threads (before the connections close).  Never waits on peers. */
void mendResilStop(struct mendResil* r);
void mendResilFree(struct mendResil* r);

/* Something was posted to a connection: progress idle connections soon. */
void mendResilWake(struct mendResil* r);
/* A receiving connection starts (+1) or stops (-1) holding an acknowledgement: while any is held the
 * service looks every millisecond and sends those held too long (their receiver may not call again). */
void mendResilAckHeld(struct mendResil* r, int delta);
/* Send a connection notice to rank `peer` over the bootstrap (queued; sent by the service). */
void mendResilSendNotice(struct mendResil* r, int peer, const struct rnetNotice* n);
/* Probe the paths of rc in `mask` (sender's progress timeout); results land in rc->probeFailed. */
void mendResilProbeRequest(struct mendResil* r, struct rnetComm* rc, uint32_t mask);
/* Confirm a suspicion on rc's path `suspect` against path `ref` to the same peer (detect.h, struct
 * mendConfirm): the verdict lands in rc->det.cf.verdict and rc->probeState becomes DONE. */
void mendResilConfirmRequest(struct mendResil* r, struct rnetComm* rc, int suspect, int ref);
/* Can rc's path p be probed (the peer has a probe listener on its NIC, our NIC an address)? */
int mendResilCanProbe(struct mendResil* r, const struct rnetComm* rc, int p);
/* rc is closing: drop every probe that refers to it. */
void mendResilForget(struct mendResil* r, struct rnetComm* rc);
/* A path from our device localDev to rank peer's remoteDev failed for `why` (enum mendRnetKill):
 * find whose NIC is at fault (three-point probing with a third host) and update every registry. */
void mendResilLocalize(struct mendResil* r, int localDev, int peer, int remoteDev, int why);
/* Is local device `dev`'s link up (1), down (0), or unknown (-1)? */
int mendResilLinkUp(struct mendResil* r, int dev);
/* Can rank's device carry a new path?  0 when it is ours and its link is down, or when the registry
 * says it is down; 1 otherwise (also without a service). */
int mendResilDevUsable(struct mendResil* r, int rank, int dev);
/* Bit d set when rank's device d can carry a new path (mendResilDevUsable); all bits without a
 * service.  The planner's plan view picks the NIC of a new connection from these masks. */
uint32_t mendResilUsableMask(struct mendResil* r, int rank);
/* A NIC works again (a path over it was rebuilt): mark it up in the registry and tell every rank,
 * unless the registry says so already. */
void mendResilNicUp(struct mendResil* r, int rank, int dev);
/* The rank this service belongs to (-1 without a communicator), and the communicator's rank count. */
int mendResilRank(const struct mendResil* r);
int mendResilRanks(const struct mendResil* r);
/* Probe the crossing pair (our localDev to peer's peerDev) of rc, whose chain has no path left: the
 * answer comes back as a CROSS_PROBED notice.  0 when the pair cannot be probed (no address). */
int mendResilCrossProbe(struct mendResil* r, struct rnetComm* rc, int localDev, int peerDev);
/* A bridge for a relay path to rank peer: a rank on a third host whose NICs work on one of our rails
 * (*myDev) and one of peer's (*peerDev; only peerDevOnly unless -1), spread over the candidates by
 * salt; -1 when there is none. */
int mendResilRelayPick(struct mendResil* r, int peer, uint64_t salt, int peerDevOnly, int* myDev, int* peerDev);
/* Send a relay request (relay.h) to the bridge rank over the bootstrap. */
struct mendRelayMsg;
void mendResilSendRelay(struct mendResil* r, int bridge, const struct mendRelayMsg* m);

#endif

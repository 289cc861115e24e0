/*
 * Link monitor: a netlink socket on the link group, so a NIC that goes down (admin) or loses its
 * carrier (cable, switch port) fences every path over it the moment the kernel says so, with no
 * timeout.  The initial state comes from the interface flags.
 */
#include "resilience/resil_priv.h"

#include <errno.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "checks.h"
#include "misc/utils.h"
#include "resilience/detect.h"

#ifndef IFF_LOWER_UP
#define IFF_LOWER_UP 0x10000
#endif

/* Current flags of an interface through ioctl; -1 when unknown. */
static int readFlags(const char* name) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct ifreq ifr;
  memset(&ifr, 0, sizeof(ifr));
  snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
  int flags = ioctl(fd, SIOCGIFFLAGS, &ifr) == 0 ? (unsigned short)ifr.ifr_flags : -1;
  close(fd);
  return flags;
}

ncclResult_t mendResilLinkOpen(struct mendResil* r) {
  for (int d = 0; d < r->nDevs; d++) {
    struct resilDev* dev = r->devs + d;
    int flags = dev->ifindex ? readFlags(dev->name) : -1;
    dev->adminUp = flags >= 0 && (flags & IFF_UP);
    dev->carrier = flags >= 0 && (flags & IFF_RUNNING);
    atomic_store(&dev->linkUp, flags < 0 ? -1 : dev->adminUp && dev->carrier);
    dev->changedMs = mendTimeMs();
  }
  r->nlFd = socket(AF_NETLINK, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (r->nlFd < 0) {
    WARN("NET/Resilient: no netlink socket (%m): link failures will be found by timeouts only");
    return ncclSuccess;
  }
  struct sockaddr_nl sa = { .nl_family = AF_NETLINK, .nl_groups = RTMGRP_LINK };
  if (bind(r->nlFd, (struct sockaddr*)&sa, sizeof(sa)) != 0) {
    WARN("NET/Resilient: cannot join netlink's link group (%m): link failures will be found by timeouts only");
    close(r->nlFd);
    r->nlFd = -1;
  }
  return ncclSuccess;
}

/* The interface changed: record it, and on a loss fence what runs over it. */
static void linkChange(struct mendResil* r, int d, int adminUp, int carrier) {
  struct resilDev* dev = r->devs + d;
  int up = adminUp && carrier, was = atomic_load(&dev->linkUp);
  dev->adminUp = adminUp;
  dev->carrier = carrier;
  if (up == was) return;
  atomic_store(&dev->linkUp, up);
  dev->changedMs = mendTimeMs();
  const char* what = up ? "up" : !adminUp ? "admin down" : "no carrier";
  if (!up) {
    WARN_SPARSE(1000, "NET/Resilient: rank %d: NIC %s (device %d) is %s; fencing its paths", r->rank, dev->name, d, what);
    mendResilEvent("link", r->rank, -1, d, -1, "link", up ? "state=up" : !adminUp ? "state=admin_down" : "state=no_carrier");
    mendResilKillDev(r, d, MEND_RNET_KILL_LINK);
    mendResilLocalize(r, d, -1, -1, MEND_RNET_KILL_LINK);
  } else {
    INFO(MEND_RESIL, "NET/Resilient: rank %d: NIC %s (device %d) is up again", r->rank, dev->name, d);
    mendResilEvent("link", r->rank, -1, d, -1, "link", "state=up");
    /* Back in use only after its paths probe healthy for MEND_FAILBACK_DELAY (probe.c). */
    struct mendHealthUpdate u = { .rank = r->rank, .dev = d, .state = MEND_NIC_PROBING, .reporter = r->rank };
    snprintf(u.verdict, sizeof(u.verdict), "link up, probing");
    mendHealthDecide(&r->health, &u);
    char extra[40];
    snprintf(extra, sizeof(extra), "epoch=%u by=link", u.epoch);
    mendResilEvent("health", r->rank, r->rank, d, -1, mendNicStateName(u.state), extra);
    struct resilMsg m = { .magic = RESIL_MSG_MAGIC, .type = RESIL_MSG_HEALTH, .u.health = u };
    for (int p = 0; p < r->nRanks; p++)
      if (p != r->rank) mendResilQueue(r, p, &m);
  }
}

static void handleMsg(struct mendResil* r, const struct nlmsghdr* nh) {
  if (nh->nlmsg_type != RTM_NEWLINK && nh->nlmsg_type != RTM_DELLINK) return;
  if (nh->nlmsg_len < NLMSG_LENGTH(sizeof(struct ifinfomsg))) return;
  const struct ifinfomsg* ifi = NLMSG_DATA(nh);
  for (int d = 0; d < r->nDevs; d++) {
    if (r->devs[d].ifindex != ifi->ifi_index) continue;
    int gone = nh->nlmsg_type == RTM_DELLINK;
    int adminUp = !gone && (ifi->ifi_flags & IFF_UP), carrier = !gone && (ifi->ifi_flags & IFF_LOWER_UP);
    linkChange(r, d, adminUp != 0, carrier != 0);
  }
}

void mendResilLinkRead(struct mendResil* r) {
  if (r->nlFd < 0) return;
  char buf[16384] __attribute__((aligned(NLMSG_ALIGNTO)));
  for (int rounds = 0; rounds < 64; rounds++) {
    ssize_t n = recv(r->nlFd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0) {
      if (errno == ENOBUFS) {
        /* Events were lost: read the flags again so no change goes unseen. */
        for (int d = 0; d < r->nDevs; d++) {
          int flags = r->devs[d].ifindex ? readFlags(r->devs[d].name) : -1;
          if (flags >= 0) linkChange(r, d, (flags & IFF_UP) != 0, (flags & IFF_RUNNING) != 0);
        }
        continue;
      }
      return;  /* EAGAIN: all read */
    }
    for (const struct nlmsghdr* nh = (const struct nlmsghdr*)buf; NLMSG_OK(nh, (unsigned)n); nh = NLMSG_NEXT(nh, n))
      handleMsg(r, nh);
  }
}

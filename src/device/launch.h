/*
 * Building a kernel launch from a plan's works (launch.c), shared by the CUDA executor and the
 * kernel-cpu executor: lanes, then the descriptor buffer the kernel reads (kernel.h).
 */
#ifndef MEND_DEVICE_LAUNCH_H_
#define MEND_DEVICE_LAUNCH_H_

#include <stddef.h>
#include <stdint.h>

#include "device/engine.h"
#include "device/kernel.h"

/* Bytes of the descriptor buffer for these works. */
size_t mendLaunchBytes(const struct mendWork* works, int nWorks);
/* Lay the works out in buf (mendLaunchBytes bytes, 8-byte aligned) for a kernel that sees the
 * buffer at address devBase (== (uintptr_t)buf for the CPU), with each connector's device view
 * (useDev) or host view; fills launch's works, laneStart and nLanes (the caller sets the rest). */
ncclResult_t mendLaunchBuild(struct mendWork* works, int nWorks, int useDev, char* buf, uintptr_t devBase,
                             struct mendDevLaunch* launch);

#endif

/*
 * External network plugins (libnccl-net*.so, ABI v8 to v11) behind Mend's internal Net interface.
 * NCCL_NET_PLUGIN: a comma list of library names or paths (each tried as given, then as
 * libnccl-net-<name>.so), "STATIC_PLUGIN" (look in the program itself) or "none"; unset: libnccl-net.so.
 * The first plugin whose name matches NCCL_NET / config.netName (case-insensitive), or the first that
 * initialises with at least one device when no name is asked for, is used; the others are unloaded.
 */
#ifndef MEND_PLUGIN_NET_PLUGIN_H_
#define MEND_PLUGIN_NET_PLUGIN_H_

#include "transport/net.h"

/* The Net a communicator uses: `name` (NULL: automatic) among the external plugin, then the built-in
 * Socket Net.  An unknown name is ncclInvalidUsage with a WARN listing what is available. */
ncclResult_t mendNetSelect(const char* name, const mendNet_t** net);
/* The loaded external plugin's ABI version (8..11), 0 when none is loaded. */
int mendNetPluginVersion(void);
/* Forget the loaded plugin (tests). */
void mendNetPluginReset(void);

#endif

#ifndef MEND_MISC_VERSION_H_
#define MEND_MISC_VERSION_H_
/* "2.28.9-mend": the version as the startup banner prints it ("NCCL version <this>+host"). */
const char* mendVersionString(void);

#include <stddef.h>
/* The CUDA runtime version in use (cudaRuntimeGetVersion form, e.g. 12040); 0 or never called: host mode. */
void mendVersionSetCuda(int cudartVersion);
/* "2.28.9-mend+cuda12.4" or "2.28.9-mend+host". */
void mendVersionFull(char* buf, size_t len);
/* Once per process: "NCCL version <full>" as a plain line at NCCL_DEBUG=VERSION/WARN, as INFO above. */
void mendPrintVersionBanner(void);
#endif

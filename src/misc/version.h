#ifndef MEND_MISC_VERSION_H_
#define MEND_MISC_VERSION_H_
/* "2.28.9-mend": the version as the startup banner prints it ("NCCL version <this>+host"). */
const char* mendVersionString(void);
#endif

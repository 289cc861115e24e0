/* Identity strings: tests/run.sh looks for MEND_LIBRARY_BANNER in the file it is about to test. */
#include "misc/version.h"
#include "nccl.h"

#define MEND_STR2(x) #x
#define MEND_STR(x) MEND_STR2(x)

__attribute__((used)) const char mendLibraryBanner[] =
    "MEND_LIBRARY_BANNER Mend " MEND_VERSION " implementing NCCL " MEND_STR(NCCL_MAJOR) "." MEND_STR(NCCL_MINOR)
    "." MEND_STR(NCCL_PATCH) NCCL_SUFFIX;

const char* mendVersionString(void) {
  return MEND_STR(NCCL_MAJOR) "." MEND_STR(NCCL_MINOR) "." MEND_STR(NCCL_PATCH) NCCL_SUFFIX;
}

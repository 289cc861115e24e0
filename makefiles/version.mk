# Mend reports NCCL's ABI version; the suffix tells users which library is loaded.
NCCL_MAJOR   := 2
NCCL_MINOR   := 30
NCCL_PATCH   := 7
NCCL_SUFFIX  := -mend
MEND_VERSION := 0.1.0
PKG_REVISION := 1

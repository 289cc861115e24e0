# Compiler flags shared by every part of the build.
CC        ?= gcc
CXX       ?= g++
CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(CUDA_HOME)/bin/nvcc
WERROR    ?= 1
DEBUG     ?= 0
ASAN      ?= 0
UBSAN     ?= 0
TSAN      ?= 0
MPI       ?= 0
# Default GPU targets: sm_80 and sm_90 code plus compute_90 PTX.
NVCC_GENCODE ?= -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90 \
                -gencode=arch=compute_90,code=compute_90

WARNFLAGS := -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers
ifeq ($(WERROR),1)
WARNFLAGS += -Werror
endif

ifeq ($(DEBUG),1)
OPTFLAGS := -O0 -g3
else
OPTFLAGS := -O2 -g
endif

SANFLAGS :=
ifeq ($(ASAN),1)
SANFLAGS += -fsanitize=address -fno-omit-frame-pointer
endif
ifeq ($(UBSAN),1)
SANFLAGS += -fsanitize=undefined -fno-sanitize-recover=undefined
endif
# ThreadSanitizer cannot share a process with ASan; build it into its own BUILDDIR (make TSAN=1 BUILDDIR=build-tsan).
ifeq ($(TSAN),1)
ifeq ($(ASAN),1)
$(error TSAN=1 and ASAN=1 cannot be combined: build them in separate BUILDDIRs)
endif
# -Wno-tsan: GCC warns that TSan does not model a standalone atomic_thread_fence; the kernel's CPU
# build (src/device/kernel_sync.h) orders its flags with such fences, so reports there may be false.
SANFLAGS += -fsanitize=thread -Wno-tsan
endif

INCFLAGS := -I$(BUILDDIR)/include -I$(BUILDDIR)/gen -Isrc
CFLAGS_LIB := -std=c11 -D_GNU_SOURCE -fPIC -fvisibility=hidden -pthread \
              $(OPTFLAGS) $(WARNFLAGS) $(SANFLAGS) $(INCFLAGS) -MMD -MP
CXXFLAGS_TEST := -std=c++17 -D_GNU_SOURCE -pthread $(OPTFLAGS) $(WARNFLAGS) -Wno-sign-compare \
                 $(SANFLAGS) $(INCFLAGS) -MMD -MP
CFLAGS_TOOL := -std=c11 -D_GNU_SOURCE -pthread $(OPTFLAGS) $(WARNFLAGS) $(SANFLAGS) $(INCFLAGS) -MMD -MP
LIBS := -lpthread -lrt -ldl -lm
# Programs find Mend's library next to them (build/bin -> build/lib); LD_LIBRARY_PATH still wins.
RUNPATH := -Wl,--enable-new-dtags -Wl,-rpath,'$$ORIGIN/../lib'

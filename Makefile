# Mend: a resilient drop-in libnccl.so.2.  `make` builds into $(BUILDDIR); `make test` runs every test.
BUILDDIR ?= build
PREFIX   ?= /usr/local

include makefiles/version.mk
include makefiles/common.mk

VERSION_CODE := $(shell printf "%d%02d%02d" $(NCCL_MAJOR) $(NCCL_MINOR) $(NCCL_PATCH))
LIBNAME  := libnccl.so
SONAME   := $(LIBNAME).$(NCCL_MAJOR)
LIBFILE  := $(LIBNAME).$(NCCL_MAJOR).$(NCCL_MINOR).$(NCCL_PATCH)

LIB_SRC  := $(shell find src -name '*.c' -not -path 'src/tools/*' | sort)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILDDIR)/obj/%.o)
HAVE_NVCC := $(shell test -x $(NVCC) && echo 1)
# The kernel (src/device/kernel.cu) is built twice: by nvcc into a fatbin the library embeds and
# loads through the CUDA driver (no CUDA library is linked: the driver is dlopened at run time), and
# by the host C++ compiler as the kernel-cpu executor the tests run.  Without nvcc the embedded image
# is empty and device mode reports that the build has no kernels.
KERNEL_CU     := src/device/kernel.cu
KERNEL_DEPS   := $(wildcard src/device/*.h) src/enqueue/program.h src/transport/fifo.h
KERNEL_FATBIN := $(BUILDDIR)/obj/src/device/kernel.fatbin
KERNEL_EMBED  := $(BUILDDIR)/gen/device/kernel_fatbin.c
KERNEL_OBJ    := $(BUILDDIR)/obj/gen/device/kernel_fatbin.o $(BUILDDIR)/obj/src/device/kernel.cpu.o
LIB_OBJ  += $(KERNEL_OBJ)
CU_OBJ   :=
CUDA_LIBS :=

# src/tools/mend_info_*.c are parts of mend-info (one option each), not tools of their own.
TOOL_PART := $(wildcard src/tools/mend_info_*.c)
TOOL_C   := $(filter-out $(TOOL_PART),$(wildcard src/tools/*.c))
TOOL_PY  := $(wildcard src/tools/*.py)
TOOLS    := $(TOOL_C:src/tools/%.c=$(BUILDDIR)/bin/%) $(TOOL_PY:src/tools/%.py=$(BUILDDIR)/bin/%)
BENCH_COMMON := $(wildcard benchmarks/common/*.c)
BENCH_COMMON_OBJ := $(BENCH_COMMON:%.c=$(BUILDDIR)/obj/%.o)
# Shared by every perf tool: keep them (make would delete them as intermediates).
.SECONDARY: $(BENCH_COMMON_OBJ)
# d2d_bw (GPU copy bandwidth and launch latency) is built only with nvcc.
BENCH_C  := $(filter-out $(if $(HAVE_NVCC),,benchmarks/d2d_bw.c),$(wildcard benchmarks/*.c))
BENCH_PY := $(wildcard benchmarks/*_perf.py)
BENCHES  := $(BENCH_C:benchmarks/%.c=$(BUILDDIR)/bin/%) $(BENCH_PY:benchmarks/%.py=$(BUILDDIR)/bin/%)
# The testbed's modules, next to installed launchers (mend-run, failover_perf).
SHARE    := $(patsubst tests/testbed/%.py,$(BUILDDIR)/share/mend/%.py,$(wildcard tests/testbed/*.py))

HEADER   := $(BUILDDIR)/include/nccl.h
# Build-time generators: src/<dir>/gen_<x>.py writes $(BUILDDIR)/gen/<dir>/gen_<x>.h (stdout).
GEN_PY   := $(shell find src -name 'gen_*.py' | sort)
GEN_H    := $(GEN_PY:src/%.py=$(BUILDDIR)/gen/%.h)
.SECONDARY: $(GEN_H)
STATIC   := $(BUILDDIR)/lib/libnccl_static.a
SHARED   := $(BUILDDIR)/lib/$(LIBFILE)
PCFILE   := $(BUILDDIR)/lib/pkgconfig/nccl.pc

.PHONY: default all lib tools benchmarks test test-gpu install clean header
default: lib tools benchmarks
all: default tests
lib: $(HEADER) $(SHARED) $(BUILDDIR)/lib/$(SONAME) $(BUILDDIR)/lib/$(LIBNAME) $(STATIC) $(PCFILE)
tools: $(TOOLS) $(SHARE)
benchmarks: $(BENCHES)
header: $(HEADER)

ifneq ($(HAVE_NVCC),1)
$(info Mend: no nvcc at $(NVCC) (set CUDA_HOME); building the host-only library.)
endif

$(HEADER): src/nccl.h.in makefiles/version.mk
	@mkdir -p $(@D)
	sed -e 's/@NCCL_MAJOR@/$(NCCL_MAJOR)/g' -e 's/@NCCL_MINOR@/$(NCCL_MINOR)/g' \
	    -e 's/@NCCL_PATCH@/$(NCCL_PATCH)/g' -e 's/@NCCL_SUFFIX@/$(NCCL_SUFFIX)/g' \
	    -e 's/@NCCL_VERSION_CODE@/$(VERSION_CODE)/g' -e 's/@MEND_VERSION@/$(MEND_VERSION)/g' $< > $@

$(BUILDDIR)/gen/%.h: src/%.py
	@mkdir -p $(@D)
	python3 $< > $@.tmp && mv $@.tmp $@

$(BUILDDIR)/obj/%.o: %.c | $(HEADER) $(GEN_H)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_LIB) -DMEND_VERSION_STR='"$(MEND_VERSION)"' -c $< -o $@

# The kernel's register and local-memory use is printed on every build; a spill fails it.
# KERNEL_FATBIN_PREBUILT: another build's fatbin, copied instead of compiled (the sanitizer builds of
# `make test` take the main build's: nvcc's output does not depend on their flags, and each compile
# costs two minutes of a CPU).
ifneq ($(KERNEL_FATBIN_PREBUILT),)
$(KERNEL_FATBIN): $(KERNEL_FATBIN_PREBUILT)
	@mkdir -p $(@D)
	cp $< $@
else ifeq ($(HAVE_NVCC),1)
$(KERNEL_FATBIN): $(KERNEL_CU) $(KERNEL_DEPS) src/device/embed_fatbin.py | $(HEADER)
	@mkdir -p $(@D)
	$(NVCC) -fatbin $(NVCC_GENCODE) -std=c++17 -O3 -Xptxas -v -I$(BUILDDIR)/include -Isrc $< -o $@.tmp 2> $@.log \
	    || { cat $@.log; exit 1; }
	python3 src/device/embed_fatbin.py --check-ptxas $@.log
	mv $@.tmp $@
endif
ifneq ($(KERNEL_FATBIN_PREBUILT)$(HAVE_NVCC),)
$(KERNEL_EMBED): $(KERNEL_FATBIN) src/device/embed_fatbin.py
	@mkdir -p $(@D)
	python3 src/device/embed_fatbin.py $< > $@.tmp && mv $@.tmp $@
else
$(KERNEL_EMBED): src/device/embed_fatbin.py
	@mkdir -p $(@D)
	python3 src/device/embed_fatbin.py > $@.tmp && mv $@.tmp $@
endif
$(BUILDDIR)/obj/gen/device/kernel_fatbin.o: $(KERNEL_EMBED)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_LIB) -c $< -o $@
$(BUILDDIR)/obj/src/device/kernel.cpu.o: $(KERNEL_CU) | $(HEADER) $(GEN_H)
	@mkdir -p $(@D)
	$(CXX) -std=c++17 -x c++ -D_GNU_SOURCE -fPIC -fvisibility=hidden -fno-exceptions -fno-rtti -pthread $(OPTFLAGS) \
	    $(WARNFLAGS) $(SANFLAGS) $(INCFLAGS) -MMD -MP -c $< -o $@

$(SHARED): $(LIB_OBJ) $(CU_OBJ) src/libnccl.map
	@mkdir -p $(@D)
	$(CC) -shared -fPIC $(SANFLAGS) -Wl,--no-as-needed -Wl,-soname,$(SONAME) \
	    -Wl,--version-script=src/libnccl.map -o $@ $(LIB_OBJ) $(CU_OBJ) $(CUDA_LIBS) $(LIBS)

$(BUILDDIR)/lib/$(SONAME): $(SHARED)
	ln -sf $(LIBFILE) $@
$(BUILDDIR)/lib/$(LIBNAME): $(BUILDDIR)/lib/$(SONAME)
	ln -sf $(SONAME) $@

$(STATIC): $(LIB_OBJ) $(CU_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

# The build tree's nccl.pc points at the build tree (make install writes one for PREFIX).
$(PCFILE): src/nccl.pc.in makefiles/version.mk Makefile
	@mkdir -p $(@D)
	sed -e 's|@PREFIX@|$(abspath $(BUILDDIR))|g' -e 's/@VERSION@/$(NCCL_MAJOR).$(NCCL_MINOR).$(NCCL_PATCH)/g' $< > $@

$(BUILDDIR)/bin/%: src/tools/%.c $(STATIC)
	@mkdir -p $(@D) $(BUILDDIR)/obj/tools
	$(CC) $(CFLAGS_TOOL) -MF $(BUILDDIR)/obj/tools/$*.d $< -o $@ $(STATIC) $(CUDA_LIBS) $(LIBS)

$(BUILDDIR)/obj/tools/%.o: src/tools/%.c | $(HEADER)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_TOOL) -c -MF $(BUILDDIR)/obj/tools/$*.d $< -o $@

$(BUILDDIR)/bin/mend-info: src/tools/mend-info.c $(TOOL_PART:src/tools/%.c=$(BUILDDIR)/obj/tools/%.o) $(STATIC)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_TOOL) -MF $(BUILDDIR)/obj/tools/mend-info.d $< $(filter %.o,$^) -o $@ $(STATIC) $(CUDA_LIBS) $(LIBS)

$(BUILDDIR)/bin/%: src/tools/%.py
	@mkdir -p $(@D)
	install -m 755 $< $@

$(BUILDDIR)/share/mend/%.py: tests/testbed/%.py
	@mkdir -p $(@D)
	install -m 644 $< $@

ifeq ($(MPI),1)
BENCH_FLAGS := -DMPI_SUPPORT $(shell mpicc --showme:compile)
BENCH_LIBS  := $(shell mpicc --showme:link)
endif
# With nvcc the perf tools run on GPU memory when a GPU is found (device mode, benchmarks/README.md):
# the CUDA runtime is linked statically, so they still start on machines without a driver.
# ($(BUILDDIR)/include comes first: Mend's nccl.h, not the toolkit's.)
ifeq ($(HAVE_NVCC),1)
BENCH_FLAGS += -DMEND_PERF_CUDA -I$(CUDA_HOME)/include
BENCH_LIBS  += $(CUDA_HOME)/lib64/libcudart_static.a -ldl -lrt -lpthread
endif
# Rebuild the perf tools when MPI= or CUDA changes: this file holds the flavour they were built with.
BENCH_FLAVOUR := $(BUILDDIR)/obj/benchmarks/flavour
$(BENCH_FLAVOUR): FORCE
	@mkdir -p $(@D)
	@echo "MPI=$(MPI) CUDA=$(HAVE_NVCC)" | cmp -s - $@ || echo "MPI=$(MPI) CUDA=$(HAVE_NVCC)" > $@
.PHONY: FORCE

$(BUILDDIR)/obj/benchmarks/%.o: benchmarks/%.c $(BENCH_FLAVOUR) | $(HEADER)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_TOOL) $(BENCH_FLAGS) -Ibenchmarks/common -c $< -o $@

$(BUILDDIR)/bin/%: benchmarks/%.py
	@mkdir -p $(@D)
	install -m 755 $< $@

# (-lnccl links through the unversioned libnccl.so: a prerequisite, or a parallel build races it.)
$(BUILDDIR)/bin/%: benchmarks/%.c $(BENCH_COMMON_OBJ) $(BENCH_FLAVOUR) $(SHARED) $(BUILDDIR)/lib/$(LIBNAME)
	@mkdir -p $(@D) $(BUILDDIR)/obj/bench
	$(CC) $(CFLAGS_TOOL) $(BENCH_FLAGS) -Ibenchmarks/common -MF $(BUILDDIR)/obj/bench/$*.d $< $(BENCH_COMMON_OBJ) \
	    -o $@ -L$(BUILDDIR)/lib -lnccl $(RUNPATH) $(BENCH_LIBS) $(LIBS)

# d2d_bw: CUDA only (no NCCL), its empty kernel compiled by nvcc.
$(BUILDDIR)/obj/benchmarks/%.cu.o: benchmarks/%.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_GENCODE) -O2 -c $< -o $@
$(BUILDDIR)/bin/d2d_bw: benchmarks/d2d_bw.c $(BUILDDIR)/obj/benchmarks/d2d_kernel.cu.o $(BENCH_FLAVOUR)
	@mkdir -p $(@D) $(BUILDDIR)/obj/bench
	$(CC) $(CFLAGS_TOOL) $(BENCH_FLAGS) -MF $(BUILDDIR)/obj/bench/d2d_bw.d $< \
	    $(BUILDDIR)/obj/benchmarks/d2d_kernel.cu.o -o $@ $(BENCH_LIBS) -lstdc++ $(LIBS)

# Peer benchmarks (benchmarks/peers: Open MPI's mpi_perf, Gloo's gloo_perf) for compare.py and
# the compare test: built into $(BUILDDIR)/bin/peers by `make` where their libraries are installed
# (libopenmpi-dev, libgloo-dev); the sub-make prints which peer it skipped and why.  They use only
# nccl.h's types, not the library, so they are not rebuilt for MPI=, CUDA or sanitizer flavours.
.PHONY: peers
benchmarks: peers
peers: $(HEADER)
	@$(MAKE) --no-print-directory -C benchmarks/peers BUILDDIR=$(abspath $(BUILDDIR))

include makefiles/tests.mk
include makefiles/fuzz.mk
include makefiles/install.mk
include makefiles/spare.mk
include makefiles/sim.mk

clean:
	rm -rf $(BUILDDIR)

-include $(shell find $(BUILDDIR)/obj -name '*.d' 2>/dev/null)

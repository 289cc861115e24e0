# Tests: one GoogleTest binary for tests/unit, one program per tests/integration/*.c,
# and scripts run by tests/run.sh.  `make test` ends with "tests: N passed, M failed".
GTEST_LIBS ?= -lgtest_main -lgtest
UNIT_SRC  := $(wildcard tests/unit/*.cc)
UNIT_OBJ  := $(UNIT_SRC:%.cc=$(BUILDDIR)/obj/%.o)
UNIT_BIN  := $(BUILDDIR)/tests/unit_tests
INTEG_SRC := $(wildcard tests/integration/*.c)
INTEG_BIN := $(INTEG_SRC:tests/integration/%.c=$(BUILDDIR)/tests/%)
TEST_HELPERS := $(wildcard tests/common/*.c)
TEST_HELPER_OBJ := $(TEST_HELPERS:%.c=$(BUILDDIR)/obj/%.o)

.PHONY: tests
tests: default $(if $(UNIT_SRC),$(UNIT_BIN)) $(INTEG_BIN)

$(BUILDDIR)/obj/tests/unit/%.o: tests/unit/%.cc | $(HEADER)
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS_TEST) -Itests/common -c $< -o $@

$(BUILDDIR)/obj/tests/common/%.o: tests/common/%.c | $(HEADER)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS_TOOL) -Itests/common -c $< -o $@

$(UNIT_BIN): $(UNIT_OBJ) $(STATIC) $(TEST_HELPER_OBJ)
	@mkdir -p $(@D)
	$(CXX) $(SANFLAGS) -pthread -o $@ $(UNIT_OBJ) $(TEST_HELPER_OBJ) $(STATIC) $(CUDA_LIBS) $(GTEST_LIBS) $(LIBS)

# (-lnccl links through the unversioned libnccl.so: a prerequisite, or a parallel build races it.)
$(BUILDDIR)/tests/%: tests/integration/%.c $(SHARED) $(BUILDDIR)/lib/$(LIBNAME) $(TEST_HELPER_OBJ)
	@mkdir -p $(@D) $(BUILDDIR)/obj/integ
	$(CC) $(CFLAGS_TOOL) -Itests/common -MF $(BUILDDIR)/obj/integ/$*.d $< $(TEST_HELPER_OBJ) -o $@ \
	    -L$(BUILDDIR)/lib -lnccl $(RUNPATH) $(LIBS)

test: tests
	BUILDDIR=$(BUILDDIR) bash tests/run.sh

# GPU suite (tests/gpu): C programs on device memory, linked with Mend's libnccl.so.2 and the static
# CUDA runtime; built where the CUDA toolkit is (nvcc, cuda_runtime_api.h, libcudart_static.a), by
# `make tests` (compile only) and by `make test-gpu`, which runs tests/gpu/run.sh (needs a GPU; no
# GoogleTest).  tests/run.sh never runs them: they live in $(BUILDDIR)/tests/gpu/, not $(BUILDDIR)/tests/.
CUDART_STATIC := $(CUDA_HOME)/lib64/libcudart_static.a
HAVE_CUDA_TK  := $(if $(and $(HAVE_NVCC),$(wildcard $(CUDART_STATIC)),$(wildcard $(CUDA_HOME)/include/cuda_runtime_api.h)),1)
GPU_TEST_SRC  := $(wildcard tests/gpu/test_*.c)
GPU_TEST_BIN  := $(GPU_TEST_SRC:tests/gpu/%.c=$(BUILDDIR)/tests/gpu/%)
GPU_HELPER_OBJ := $(patsubst %.c,$(BUILDDIR)/obj/%.o,$(filter-out $(GPU_TEST_SRC),$(wildcard tests/gpu/*.c)))
GPU_TEST_FLAGS := $(CFLAGS_TOOL) -I$(CUDA_HOME)/include -Itests/common -Itests/integration -Itests/gpu
# Programs in build/tests/gpu find build/lib; LD_LIBRARY_PATH (tests/gpu/run.sh) still wins.
GPU_RUNPATH := -Wl,--enable-new-dtags -Wl,-rpath,'$$ORIGIN/../../lib'

.SECONDARY: $(GPU_HELPER_OBJ)
.PHONY: gpu-tests
gpu-tests: $(if $(HAVE_CUDA_TK),$(GPU_TEST_BIN))
tests: gpu-tests

$(BUILDDIR)/obj/tests/gpu/%.o: tests/gpu/%.c | $(HEADER)
	@mkdir -p $(@D)
	$(CC) $(GPU_TEST_FLAGS) -c $< -o $@

$(BUILDDIR)/tests/gpu/%: tests/gpu/%.c $(GPU_HELPER_OBJ) $(TEST_HELPER_OBJ) $(SHARED) $(BUILDDIR)/lib/$(LIBNAME)
	@mkdir -p $(@D) $(BUILDDIR)/obj/gpu
	$(CC) $(GPU_TEST_FLAGS) -MF $(BUILDDIR)/obj/gpu/$*.d $< $(GPU_HELPER_OBJ) $(TEST_HELPER_OBJ) -o $@ \
	    -L$(BUILDDIR)/lib -lnccl $(GPU_RUNPATH) $(CUDART_STATIC) -ldl -lrt -lpthread -lm

# The library, the perf tools and the GPU programs (not the GoogleTest suite), then the GPU suite.
test-gpu: default gpu-tests
ifeq ($(HAVE_CUDA_TK),1)
	BUILDDIR=$(BUILDDIR) bash tests/gpu/run.sh
else
	@echo "test-gpu: no CUDA toolkit under CUDA_HOME=$(CUDA_HOME) (nvcc, include/cuda_runtime_api.h, lib64/libcudart_static.a)"; exit 1
endif

# Example plugins (built for the tests; they show plugin authors the ABI).
PLUGIN_FLAGS := -std=c11 -D_GNU_SOURCE -fPIC -shared $(OPTFLAGS) $(WARNFLAGS) -I$(BUILDDIR)/include
EXAMPLE_PLUGINS := $(BUILDDIR)/lib/libnccl-net-example.so $(BUILDDIR)/lib/libnccl-net-example8.so \
                   $(BUILDDIR)/lib/libnccl-tuner-example.so
tests: $(EXAMPLE_PLUGINS)
$(BUILDDIR)/lib/libnccl-net-example.so: ext-net/example/plugin.c ext-net/nccl_net.h | $(HEADER)
	$(CC) $(PLUGIN_FLAGS) $< -o $@
$(BUILDDIR)/lib/libnccl-net-example8.so: ext-net/example/plugin.c ext-net/nccl_net.h | $(HEADER)
	$(CC) $(PLUGIN_FLAGS) -DEXAMPLE_NET_ABI=8 $< -o $@
$(BUILDDIR)/lib/libnccl-tuner-example.so: ext-tuner/example/plugin.c ext-tuner/nccl_tuner.h | $(HEADER)
	$(CC) $(PLUGIN_FLAGS) $< -o $@

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

$(BUILDDIR)/tests/%: tests/integration/%.c $(SHARED) $(BUILDDIR)/lib/$(SONAME) $(TEST_HELPER_OBJ)
	@mkdir -p $(@D) $(BUILDDIR)/obj/integ
	$(CC) $(CFLAGS_TOOL) -Itests/common -MF $(BUILDDIR)/obj/integ/$*.d $< $(TEST_HELPER_OBJ) -o $@ \
	    -L$(BUILDDIR)/lib -lnccl $(RUNPATH) $(LIBS)

test: tests
	BUILDDIR=$(BUILDDIR) bash tests/run.sh

# GPU suites: the same engine and transport tests on device buffers (needs a GPU).
test-gpu: tests
	BUILDDIR=$(BUILDDIR) MEND_TEST_GPU=1 bash tests/run.sh

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

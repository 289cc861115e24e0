# Fuzz targets and the sanitizer passes of `make test` (tests/fuzz/README.md).
#
#   make fuzz        builds tests/fuzz/fuzz_*.c with clang's libFuzzer, ASan and UBSan into
#                    $(BUILDDIR)/fuzz/ (each target links the few library files it checks, built
#                    with clang into $(BUILDDIR)/fuzz/obj); run them with tests/fuzz/run.sh SECONDS.
#   make san-tests   builds the GoogleTest suite with ASan+UBSan into $(SAN_BUILDDIR)
#                    (default $(BUILDDIR)/asan); tests/run.sh runs it after the normal suite.
#   make tsan-tests  the same with TSan into $(TSAN_BUILDDIR) (default $(BUILDDIR)/tsan); tests/run.sh
#                    runs its Rnet, NetSocket and lighter Engine suites (MEND_TSAN_FILTER).
# `make test` builds fuzz (where clang is), san-tests and tsan-tests too (MEND_CI_SANITIZERS=0 leaves
# them out).
FUZZ_CC       ?= clang
FUZZ_DIR      := $(BUILDDIR)/fuzz
FUZZ_SRC      := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BIN      := $(FUZZ_SRC:tests/fuzz/%.c=$(FUZZ_DIR)/%)
# The library files the targets check, and what they call (logging, parameters, MACs, sockets).
# agree.c is linked as it is: fuzz_agree provides the planner calls it makes.
FUZZ_LIB_SRC  := $(filter-out src/misc/cudrv.c,$(wildcard src/misc/*.c)) src/bootstrap_wire.c src/bootstrap_ras_wire.c \
                 src/transport/net_socket_wire.c src/resilience/resil_wire.c src/resilience/health.c \
                 src/resilience/agree.c
FUZZ_LIB_OBJ  := $(FUZZ_LIB_SRC:%.c=$(FUZZ_DIR)/obj/%.o)
.SECONDARY: $(FUZZ_LIB_OBJ)
FUZZ_SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS   := -std=c11 -D_GNU_SOURCE -pthread -g -O1 $(WARNFLAGS) $(FUZZ_SANFLAGS) $(INCFLAGS) -MMD -MP
HAVE_FUZZ_CC  := $(shell command -v $(FUZZ_CC) >/dev/null 2>&1 && echo 1)

.PHONY: fuzz san-tests tsan-tests
ifeq ($(HAVE_FUZZ_CC),1)
fuzz: $(FUZZ_BIN)
else
fuzz:
	@echo "make fuzz: no $(FUZZ_CC) (install clang and libclang-rt-14-dev: bash .ci/install-deps)"; exit 1
endif

$(FUZZ_DIR)/obj/%.o: %.c | $(HEADER) $(GEN_H)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

# An archive: each target pulls only the files it calls (fuzz_agree brings its own fake planner).
FUZZ_LIB := $(FUZZ_DIR)/libmendfuzz.a
$(FUZZ_LIB): $(FUZZ_LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

$(FUZZ_DIR)/%: tests/fuzz/%.c tests/fuzz/fuzz.h $(FUZZ_LIB)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -Itests/fuzz $< $(FUZZ_LIB) -o $@ $(LIBS)

# Sanitizer flavours of the GoogleTest suite, each in its own build directory (sub-makes share -j).
SAN_BUILDDIR  ?= $(BUILDDIR)/asan
TSAN_BUILDDIR ?= $(BUILDDIR)/tsan
# Where nvcc is, both take this build's kernel image (KERNEL_FATBIN_PREBUILT, Makefile) rather than
# compile their own, the same bytes.
SAN_FATBIN    := $(if $(HAVE_NVCC),KERNEL_FATBIN_PREBUILT=$(abspath $(KERNEL_FATBIN)))
san-tests: $(if $(HAVE_NVCC),$(KERNEL_FATBIN))
	+nice -n 10 $(MAKE) --no-print-directory ASAN=1 UBSAN=1 TSAN=0 BUILDDIR=$(SAN_BUILDDIR) $(SAN_FATBIN) \
	    $(SAN_BUILDDIR)/tests/unit_tests
tsan-tests: $(if $(HAVE_NVCC),$(KERNEL_FATBIN))
	+nice -n 10 $(MAKE) --no-print-directory TSAN=1 ASAN=0 UBSAN=0 BUILDDIR=$(TSAN_BUILDDIR) $(SAN_FATBIN) \
	    $(TSAN_BUILDDIR)/tests/unit_tests

ifneq ($(MEND_CI_SANITIZERS),0)
test: $(if $(HAVE_FUZZ_CC),fuzz) san-tests tsan-tests
endif

-include $(shell find $(FUZZ_DIR) -name '*.d' 2>/dev/null)

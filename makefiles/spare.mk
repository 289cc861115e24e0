# SPARe (sim/spare/README.md): the reordering controller as a library (linked into the unit tests),
# its CLI mend-spare, the shared library the Python binding loads, and the SimGrid time-to-train
# simulator mend-spare-sim (built only where pkg-config finds SimGrid; its test skips otherwise).
SPARE_SRC := sim/spare/spare_layout.c sim/spare/spare_match.c sim/spare/spare_flow.c
SPARE_OBJ := $(SPARE_SRC:%.c=$(BUILDDIR)/obj/%.o)
SPARE_SO  := $(BUILDDIR)/lib/libmendspare.so
SPARE_CLI := $(BUILDDIR)/bin/mend-spare
SPARE_SIM := $(BUILDDIR)/bin/mend-spare-sim
HAVE_SIMGRID := $(shell pkg-config --exists simgrid 2>/dev/null && echo 1)
.SECONDARY: $(SPARE_OBJ)

tools: $(SPARE_SO) $(SPARE_CLI) $(if $(HAVE_SIMGRID),$(SPARE_SIM))

$(SPARE_SO): $(SPARE_OBJ)
	@mkdir -p $(@D)
	$(CC) $(SANFLAGS) -shared -o $@ $^ $(LIBS)

$(SPARE_CLI): sim/spare/spare_cli.c $(SPARE_OBJ) | $(HEADER)
	@mkdir -p $(@D) $(BUILDDIR)/obj/spare
	$(CC) $(CFLAGS_TOOL) -MF $(BUILDDIR)/obj/spare/cli.d $< $(SPARE_OBJ) -o $@ $(LIBS)

$(SPARE_SIM): sim/spare/spare_sim.c sim/spare/spare_sim_run.c sim/spare/spare_sim.h $(SPARE_OBJ) | $(HEADER)
	@mkdir -p $(@D) $(BUILDDIR)/obj/spare
	$(CC) $(CFLAGS_TOOL) -MF $(BUILDDIR)/obj/spare/sim.d $(filter %.c,$^) $(SPARE_OBJ) -o $@ \
	    $(shell pkg-config --cflags --libs simgrid) $(LIBS)

# The unit tests (tests/unit/test_spare.cc) check the controller: link its objects in.
$(UNIT_BIN): $(SPARE_OBJ)
$(UNIT_BIN): UNIT_OBJ += $(SPARE_OBJ)

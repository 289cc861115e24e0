# The planner at scale (sim/README.md): mend-plan runs Mend's own planner without communicators
# (src/enqueue/plan_offline.c, part of the library) for a cluster described by a topology file.
SIM_PLAN := $(BUILDDIR)/bin/mend-plan

tools: $(SIM_PLAN)

$(SIM_PLAN): sim/mend_plan.c sim/topo_file.c sim/topo_file.h $(STATIC)
	@mkdir -p $(@D) $(BUILDDIR)/obj/sim
	$(CC) $(CFLAGS_TOOL) -Isim -MF $(BUILDDIR)/obj/sim/mend-plan.d $(filter %.c,$^) -o $@ $(STATIC) $(CUDA_LIBS) $(LIBS)

# mend-sim: the SimGrid simulation of Mend's programs (built only where pkg-config finds SimGrid,
# Debian's libsimgrid-dev; its test skips otherwise).
SIM_RUN := $(BUILDDIR)/bin/mend-sim
HAVE_SIMGRID ?= $(shell pkg-config --exists simgrid 2>/dev/null && echo 1)

tools: $(if $(HAVE_SIMGRID),$(SIM_RUN))

$(SIM_RUN): sim/mend_sim.c sim/topo_file.c sim/topo_file.h $(STATIC)
	@mkdir -p $(@D) $(BUILDDIR)/obj/sim
	$(CC) $(CFLAGS_TOOL) -Isim -MF $(BUILDDIR)/obj/sim/mend-sim.d $(filter %.c,$^) -o $@ $(STATIC) \
	    $(shell pkg-config --cflags --libs simgrid) $(CUDA_LIBS) $(LIBS)

# `make install PREFIX=...` installs the library, header, pkg-config file and tools.
DESTDIR ?=
.PHONY: install
install: default
	install -d $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin \
	    $(DESTDIR)$(PREFIX)/share/mend
	install -m 755 $(SHARED) $(DESTDIR)$(PREFIX)/lib/
	ln -sf $(LIBFILE) $(DESTDIR)$(PREFIX)/lib/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(PREFIX)/lib/$(LIBNAME)
	install -m 644 $(STATIC) $(DESTDIR)$(PREFIX)/lib/
	install -m 644 $(HEADER) $(DESTDIR)$(PREFIX)/include/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's/@VERSION@/$(NCCL_MAJOR).$(NCCL_MINOR).$(NCCL_PATCH)/g' \
	    src/nccl.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/nccl.pc
	for t in $(TOOLS) $(BENCHES); do install -m 755 $$t $(DESTDIR)$(PREFIX)/bin/; done
	install -m 644 $(SHARE) $(DESTDIR)$(PREFIX)/share/mend/

# Packages: make pkg.debian.build | pkg.redhat.build | pkg.txz.build
pkg.%.build: default
	BUILDDIR=$(BUILDDIR) bash pkg/$*/build.sh

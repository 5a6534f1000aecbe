# SPDX-License-Identifier: MIT
# make            build/ubtrfs, build/libubtrfs.a and build/libubtrfs.so.VERSION
# make check      unit tests (cmocka) + integration tests (pytest, needs root)
# make unit       unit tests only
# make SAN=1 ...  the same with ASan+UBSan, into build-san/
# make TSAN=1 ... the same with ThreadSanitizer, into build-tsan/
# make BUILD=dir  any of the above into another build directory
# make fuzz       libFuzzer targets (clang), into build-fuzz/
# make CC=clang   any of the above with clang
# make man        the man pages (scdoc), into $(BUILD)/man/
# make install    the command, both libraries, the headers, ubtrfs.pc, the man pages and the
#                 bash completion under PREFIX (/usr/local), staged under DESTDIR when set;
#                 make uninstall removes them (docs/install.md)
CC ?= cc
SAN ?= 0
O ?= 2
BUILD := $(if $(filter 1,$(TSAN)),build-tsan,$(if $(filter 1,$(SAN)),build-san,build))

# ---- the version: written once, in include/ubtrfs/version.h ----
version_part = $(shell sed -n 's/^[#]define UBTRFS_VERSION_$(1) *\([0-9][0-9]*\).*/\1/p' include/ubtrfs/version.h)
VERSION_MAJOR := $(call version_part,MAJOR)
VERSION_MINOR := $(call version_part,MINOR)
VERSION_PATCH := $(call version_part,PATCH)
VERSION := $(VERSION_MAJOR).$(VERSION_MINOR).$(VERSION_PATCH)
# the ABI's name: a program linked against the library records it and loads any library of that major
SONAME := libubtrfs.so.$(VERSION_MAJOR)
SOFILE := libubtrfs.so.$(VERSION)

# ---- flags ----
WARN := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter -Wno-missing-field-initializers
CFLAGS_BASE := -std=gnu11 -O$(O) -g -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -Iinclude -Ilib $(WARN) \
	$(shell pkg-config --cflags fuse3 2>/dev/null)
SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
ifeq ($(SAN),1)
CFLAGS_BASE += $(SANFLAGS)
LDFLAGS_BASE += $(SANFLAGS)
endif
# ThreadSanitizer (make TSAN=1): the parallel FUSE tests and the engine's threads run under it
ifeq ($(TSAN),1)
CFLAGS_BASE += -fsanitize=thread -fno-omit-frame-pointer
LDFLAGS_BASE += -fsanitize=thread
endif
# The library's objects go into both libubtrfs.a and the shared library, so they are position
# independent; only what include/ubtrfs/ declares is exported (ubtrfs/api.h says how), and a
# call from inside the library to an exported function need not go through the PLT. Every function
# the library defines has a declaration in sight (-Wmissing-prototypes): a public one that did not
# see its header would silently stay unexported.
LIB_CFLAGS := -fPIC -fvisibility=hidden -fno-semantic-interposition -Wmissing-prototypes
# what the library needs (the shared library records it; ubtrfs.pc's Libs.private lists it for a
# static link); nbd devices load libnbd with dlopen (lib/dev/nbd_lib.c) and SHA-256 checksums
# libcrypto (lib/disk/csum.c), only their headers are needed
LIB_LIBS := -lisal -lxxhash -lb2 -lz -ldeflate -llzo2 -lzstd -luuid -lblkid -lm -ldl -lpthread
# the command adds libfuse3 (cmd/mount*.c); tests and tools link the same
LIBS := $(LIB_LIBS) $(shell pkg-config --libs fuse3)
# a shared library must name every library it uses (not under a sanitizer: its runtime comes
# with the program)
SO_LDFLAGS := $(if $(filter 1,$(SAN) $(TSAN)),,-Wl,-z,defs) -Wl,--as-needed

# ---- sources: every list is a wildcard, so a new file needs no change here ----
LIB_SRCS := $(sort $(wildcard lib/*/*.c))
CMD_SRCS := $(sort $(wildcard cmd/*.c))
UNIT_SRCS := $(sort $(wildcard tests/unit/test_*.c))
FUZZ_SRCS := $(sort $(wildcard tests/fuzz/fuzz_*.c))
# tests/tools: a .c with a .h of its name is a helper (crash_cuts), in an archive every tool links;
# slowdev and rec_fuse are FUSE filesystems of their own, without the library; nbd_record is an
# nbdkit plugin (test_mount_crash.py builds it); every other .c is one tool
TOOL_HELPER_SRCS := $(sort $(patsubst %.h,%.c,$(wildcard tests/tools/*.h)))
TOOL_SRCS := $(sort $(filter-out $(TOOL_HELPER_SRCS) tests/tools/slowdev.c tests/tools/rec_fuse.c tests/tools/nbd_record.c,\
	$(wildcard tests/tools/*.c)))
# tools written as library users: built without -Ilib, they can include no private header
LIBUSER_TOOLS := nocow_driver threads_driver balance_driver undo_driver undo_crash recover_driver
MAN_SRCS := $(sort $(wildcard man/*.scd))

LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/%.o)
CMD_OBJS := $(CMD_SRCS:%.c=$(BUILD)/%.o)
UNIT_BINS := $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/unit/%)
FUZZ_BINS := $(FUZZ_SRCS:tests/fuzz/%.c=build-fuzz/%)
TOOL_BINS := $(TOOL_SRCS:tests/tools/%.c=$(BUILD)/tests/tools/%)
TOOL_HELPER_LIB := $(BUILD)/tests/tools/libtools.a
MAN_PAGES := $(MAN_SRCS:man/%.scd=$(BUILD)/man/%)
# the names the tests and scripts use for some tools
ENGINE_DRIVER := $(BUILD)/tests/tools/engine_driver
FILEAPI_DRIVER := $(BUILD)/tests/tools/fileapi_driver
SPACE_DRIVER := $(BUILD)/tests/tools/space_driver
THREADS_DRIVER := $(BUILD)/tests/tools/threads_driver
LOGCOMMIT_DRIVER := $(BUILD)/tests/tools/logcommit_driver
NOCOW_DRIVER := $(BUILD)/tests/tools/nocow_driver
TREE_DIGEST := $(BUILD)/tests/tools/tree_digest

all: $(BUILD)/ubtrfs $(BUILD)/libubtrfs.so $(BUILD)/$(SONAME)

# The compiler and flags a build directory's objects were made with: when they change (CC=clang
# after gcc, CFLAGS=...), everything in it is built again rather than mixed.
FLAGS_STAMP := $(BUILD)/.flags
BUILD_FLAGS := $(CC) $(CPPFLAGS) $(CFLAGS_BASE) $(LIB_CFLAGS) $(CFLAGS) $(LDFLAGS_BASE) $(LDFLAGS)
$(FLAGS_STAMP): FORCE
	@mkdir -p $(dir $@)
	@printf '%s\n' '$(BUILD_FLAGS)' | cmp -s - $@ || printf '%s\n' '$(BUILD_FLAGS)' > $@

$(BUILD)/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS_BASE) $(CFLAGS) -MMD -MP -c $< -o $@

# ---- the library: static, and shared with its soname ----
$(LIB_OBJS): private CFLAGS_BASE += $(LIB_CFLAGS)

$(BUILD)/libubtrfs.a: $(LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/$(SOFILE): $(LIB_OBJS)
	$(CC) -shared -Wl,-soname,$(SONAME) $(SO_LDFLAGS) $(LDFLAGS_BASE) $(LDFLAGS) -o $@ $^ $(LIB_LIBS)
# the soname (what programs load) and the development link (what -lubtrfs finds) point at the file
$(BUILD)/$(SONAME) $(BUILD)/libubtrfs.so: $(BUILD)/$(SOFILE)
	ln -sfn $(SOFILE) $@

# ---- the command: cmd/ is a library user and sees only include/ (lib/'s private headers stay
# out of reach); linked with the static library, so it runs from the build directory as installed ----
$(CMD_OBJS): private CFLAGS_BASE := $(filter-out -Ilib,$(CFLAGS_BASE))

$(BUILD)/ubtrfs: $(CMD_OBJS) $(BUILD)/libubtrfs.a
	$(CC) $(LDFLAGS_BASE) $(LDFLAGS) -o $@ $(CMD_OBJS) $(BUILD)/libubtrfs.a $(LIBS)

# ---- tests ----
$(BUILD)/tests/unit/%: tests/unit/%.c $(BUILD)/libubtrfs.a $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS_BASE) $(CFLAGS) $(LDFLAGS_BASE) -MMD -MP -MF $@.d -o $@ $< $(BUILD)/libubtrfs.a -lcmocka $(LIBS)

unit: $(UNIT_BINS)
	@set -e; for t in $(UNIT_BINS); do echo "== $$t"; $$t; done

# test drivers (tests/tools/*.c), each built against the library under test; the integration tests
# build the one they run with make (ubtrfs_testlib.test_tool)
$(TOOL_HELPER_LIB): $(TOOL_HELPER_SRCS:%.c=$(BUILD)/%.o)
	rm -f $@ && ar rcs $@ $^
$(TOOL_BINS): $(BUILD)/tests/tools/%: tests/tools/%.c $(TOOL_HELPER_LIB) $(BUILD)/libubtrfs.a $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS_BASE) $(CFLAGS) $(LDFLAGS_BASE) -MMD -MP -MF $@.d -o $@ $< \
		$(TOOL_HELPER_LIB) $(BUILD)/libubtrfs.a $(LIBS) -lcrypto
# (-lcrypto: some drivers hash what they read with OpenSSL; the library loads it only for SHA-256)
# (private: the library and helpers these depend on keep -Ilib)
$(addprefix $(BUILD)/tests/tools/,$(LIBUSER_TOOLS)): private CFLAGS_BASE := $(filter-out -Ilib,$(CFLAGS_BASE))
# the FUSE mount's stalling device (test_mount_parallel.py), in any build directory (build-tsan
# too): it needs neither the library nor a sanitizer
# (rec_fuse, the recording device of several images, bench/write-hole, likewise)
%/tests/tools/slowdev: tests/tools/slowdev.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS_BASE) $(CFLAGS) $(LDFLAGS_BASE) -o $@ $< $(shell pkg-config --libs fuse3)
%/tests/tools/rec_fuse: tests/tools/rec_fuse.c
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS_BASE) $(CFLAGS) $(LDFLAGS_BASE) -o $@ $< $(shell pkg-config --libs fuse3)
tools: $(TOOL_BINS) $(BUILD)/tests/tools/slowdev $(BUILD)/tests/tools/rec_fuse

integration: all tools
	UBTRFS=$(CURDIR)/$(BUILD)/ubtrfs /usr/bin/pytest-3 -q $$(/usr/bin/python3 -c 'import xdist' 2>/dev/null && printf -- '-n %s --dist loadgroup' "$${UBTRFS_TEST_JOBS:-2}") --durations=30 tests/integration $(PYTEST_ARGS)

check: unit integration

# make TSAN=1 integration-tsan: the mount's parallel tests (many readers, a stalled device, several
# writing processes) and the engine's threads under ThreadSanitizer
integration-tsan: $(BUILD)/ubtrfs tools
	UBTRFS=$(CURDIR)/$(BUILD)/ubtrfs TSAN_OPTIONS=$${TSAN_OPTIONS:-halt_on_error=1} /usr/bin/pytest-3 -q \
		tests/integration/test_mount_parallel.py tests/integration/test_engine_threads.py \
		tests/integration/test_mount_multiproc.py \
		tests/integration/test_balance.py::test_online_balance_while_writing \
		tests/integration/test_device.py::test_online_devices_while_writing $(PYTEST_ARGS)

# ---- fuzzers ----
# the printers are fuzzed too (they must survive any bytes), so they link into every target
PRINT_SRCS := $(sort $(wildcard cmd/print_*.c))
# undefined behaviour is a finding like any crash: it stops the run
FUZZ_CFLAGS := $(filter-out -Werror,$(CFLAGS_BASE)) -Icmd -fno-sanitize-recover=undefined
FUZZ_OBJS := $(patsubst %.c,build-fuzz/obj/%.o,$(LIB_SRCS) $(PRINT_SRCS))
build-fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link,address,undefined -MMD -MP -c $< -o $@
# the whole-image targets share the image harness, and link the commands whose logic they run
# (every cmd/ file but main.c and the FUSE session, mount.c and mount_ops.c)
FUZZ_IMAGE_DIR_DEF := -DFUZZ_IMAGE_DIR='"$(CURDIR)/tests/fuzz/images"'
FUZZ_HARNESS := build-fuzz/obj/tests/fuzz/image_harness.o
FUZZ_CMD_OBJS := $(patsubst %.c,build-fuzz/obj/%.o,$(filter-out cmd/main.c cmd/mount.c cmd/mount_ops.c $(PRINT_SRCS),$(CMD_SRCS)))
FUZZ_IMAGE_BINS := $(addprefix build-fuzz/,fuzz_image fuzz_check fuzz_mount fuzz_restore)
$(FUZZ_HARNESS): FUZZ_CFLAGS += $(FUZZ_IMAGE_DIR_DEF)
$(FUZZ_IMAGE_BINS): FUZZ_EXTRA = $(FUZZ_HARNESS) $(FUZZ_CMD_OBJS)
$(FUZZ_IMAGE_BINS): $(FUZZ_HARNESS) $(FUZZ_CMD_OBJS)
build-fuzz/%: tests/fuzz/%.c $(FUZZ_OBJS)
	clang $(FUZZ_CFLAGS) $(FUZZ_IMAGE_DIR_DEF) -fsanitize=fuzzer,address,undefined -MMD -MP -MF build-fuzz/obj/$(notdir $@).d -o $@ $< $(FUZZ_EXTRA) $(FUZZ_OBJS) $(LIBS)

fuzz: $(FUZZ_BINS)

# ---- benchmarks built against the library (bench/README.md) ----
$(BUILD)/bench/%: bench/%.c $(BUILD)/libubtrfs.a
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS_BASE) $(CFLAGS) $(LDFLAGS_BASE) -o $@ $< $(BUILD)/libubtrfs.a $(LIBS)
# the block cache: cost per cached lookup, 1/2/4 threads, on a fresh mkfs.btrfs image
bench-cache: $(BUILD)/bench/bench_cache
	@set -e; d=$$(mktemp -d /tmp/ubtrfs-bench-cache-XXXXXX); trap 'rm -rf $$d' EXIT; \
	mkdir $$d/src; for i in $$(seq 3000); do printf %s $$i > $$d/src/f-$$i; done; \
	truncate -s 256M $$d/img; mkfs.btrfs -q -f -n 4096 --rootdir $$d/src $$d/img >/dev/null; \
	$(BUILD)/bench/bench_cache $$d/img 4

# ---- man pages: scdoc sources in man/, rendered with the version; a line @OPEN_OPTIONS@ takes
# man/open-options.inc, the options every command that opens a filesystem shares ----
$(BUILD)/man/%: man/%.scd man/open-options.inc include/ubtrfs/version.h
	@mkdir -p $(dir $@)
	@command -v scdoc >/dev/null || { echo "scdoc is needed for the man pages (apt install scdoc)" >&2; exit 2; }
	sed -e 's/@VERSION@/$(VERSION)/g' -e '/^@OPEN_OPTIONS@$$/{r man/open-options.inc' -e 'd;}' $< | scdoc > $@.tmp
	mv $@.tmp $@
man: $(MAN_PAGES)

# ---- install (PREFIX, DESTDIR and the directories below may be given on the command line) ----
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
MANDIR ?= $(PREFIX)/share/man
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
INSTALL ?= install
PUBLIC_HEADERS := $(sort $(wildcard include/ubtrfs/*.h))

# the pkg-config file, for the directories of this install
$(BUILD)/ubtrfs.pc: ubtrfs.pc.in include/ubtrfs/version.h FORCE
	@mkdir -p $(dir $@)
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
		-e 's|@VERSION@|$(VERSION)|' -e 's|@LIBS_PRIVATE@|$(LIB_LIBS)|' $< > $@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi

install: all man $(BUILD)/ubtrfs.pc
	$(INSTALL) -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR)/ubtrfs \
		$(DESTDIR)$(PKGCONFIGDIR) $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(BASHCOMPDIR)
	$(INSTALL) -m 755 $(BUILD)/ubtrfs $(DESTDIR)$(BINDIR)/ubtrfs
	$(INSTALL) -m 644 $(BUILD)/$(SOFILE) $(BUILD)/libubtrfs.a $(DESTDIR)$(LIBDIR)/
	ln -sfn $(SOFILE) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sfn $(SONAME) $(DESTDIR)$(LIBDIR)/libubtrfs.so
	$(INSTALL) -m 644 $(PUBLIC_HEADERS) $(DESTDIR)$(INCLUDEDIR)/ubtrfs/
	$(INSTALL) -m 644 $(BUILD)/ubtrfs.pc $(DESTDIR)$(PKGCONFIGDIR)/ubtrfs.pc
	$(INSTALL) -m 644 $(MAN_PAGES) $(DESTDIR)$(MANDIR)/man8/
	$(INSTALL) -m 644 completion/ubtrfs $(DESTDIR)$(BASHCOMPDIR)/ubtrfs

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/ubtrfs $(DESTDIR)$(LIBDIR)/$(SOFILE) $(DESTDIR)$(LIBDIR)/$(SONAME) \
		$(DESTDIR)$(LIBDIR)/libubtrfs.so $(DESTDIR)$(LIBDIR)/libubtrfs.a \
		$(DESTDIR)$(PKGCONFIGDIR)/ubtrfs.pc $(DESTDIR)$(BASHCOMPDIR)/ubtrfs \
		$(addprefix $(DESTDIR)$(INCLUDEDIR)/ubtrfs/,$(notdir $(PUBLIC_HEADERS))) \
		$(addprefix $(DESTDIR)$(MANDIR)/man8/,$(notdir $(MAN_PAGES)))
	-rmdir $(DESTDIR)$(INCLUDEDIR)/ubtrfs 2>/dev/null

clean:
	rm -rf build build-san build-tsan build-fuzz

FORCE:
.PHONY: all unit integration integration-tsan check fuzz tools bench-cache man install uninstall clean FORCE
# keep the fuzz objects between targets and runs
.SECONDARY:
-include $(LIB_OBJS:.o=.d) $(CMD_OBJS:.o=.d) $(UNIT_BINS:=.d) $(TOOL_BINS:=.d) $(TOOL_HELPER_SRCS:%.c=$(BUILD)/%.d) \
	$(FUZZ_OBJS:.o=.d) $(FUZZ_BINS:build-fuzz/%=build-fuzz/obj/%.d) $(FUZZ_HARNESS:.o=.d) $(FUZZ_CMD_OBJS:.o=.d)

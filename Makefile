# SPDX-License-Identifier: MIT
# make            build build/ubtrfs and build/libubtrfs.a
# make check      unit tests (cmocka) + integration tests (pytest, needs root)
# make unit       unit tests only
# make SAN=1 ...  the same with ASan+UBSan, into build-san/
# make TSAN=1 ... the same with ThreadSanitizer, into build-tsan/
# make fuzz       libFuzzer targets (clang), into build-fuzz/
# make CC=clang   any of the above with clang
CC ?= cc
SAN ?= 0
O ?= 2
BUILD := $(if $(filter 1,$(TSAN)),build-tsan,$(if $(filter 1,$(SAN)),build-san,build))

WARN := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter -Wno-missing-field-initializers
CFLAGS_BASE := -std=gnu11 -O$(O) -g -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -Iinclude -Ilib $(WARN) \
	$(shell pkg-config --cflags fuse3 2>/dev/null)
SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
ifeq ($(SAN),1)
CFLAGS_BASE += $(SANFLAGS)
LDFLAGS_BASE += $(SANFLAGS)
endif
LIBS := -lisal -lxxhash -lcrypto -lb2 -lz -llzo2 -lzstd -luuid -lblkid -lm

LIB_SRCS := $(sort $(wildcard lib/*/*.c))
CMD_SRCS := $(sort $(wildcard cmd/*.c))
UNIT_SRCS := $(sort $(wildcard tests/unit/test_*.c))
FUZZ_SRCS := $(sort $(wildcard tests/fuzz/fuzz_*.c))

LIB_OBJS := $(LIB_SRCS:%.c=$(BUILD)/%.o)
CMD_OBJS := $(CMD_SRCS:%.c=$(BUILD)/%.o)
UNIT_BINS := $(UNIT_SRCS:tests/unit/%.c=$(BUILD)/tests/unit/%)
FUZZ_BINS := $(FUZZ_SRCS:tests/fuzz/%.c=build-fuzz/%)

all: $(BUILD)/ubtrfs

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/libubtrfs.a: $(LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/ubtrfs: $(CMD_OBJS) $(BUILD)/libubtrfs.a
	$(CC) $(LDFLAGS_BASE) $(LDFLAGS) -o $@ $(CMD_OBJS) $(BUILD)/libubtrfs.a $(LIBS)

$(BUILD)/tests/unit/%: tests/unit/%.c $(BUILD)/libubtrfs.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) $(LDFLAGS_BASE) -MMD -MP -MF $@.d -o $@ $< $(BUILD)/libubtrfs.a -lcmocka $(LIBS)

unit: $(UNIT_BINS)
	@set -e; for t in $(UNIT_BINS); do echo "== $$t"; $$t; done

integration: $(BUILD)/ubtrfs tools
	UBTRFS=$(CURDIR)/$(BUILD)/ubtrfs /usr/bin/pytest-3 -q $$(/usr/bin/python3 -c 'import xdist' 2>/dev/null && printf -- '-n %s --dist loadgroup' "$${UBTRFS_TEST_JOBS:-2}") tests/integration $(PYTEST_ARGS)

check: unit integration

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

# ---- write engine test driver: tests/integration/test_engine.py builds and runs it ----
ENGINE_DRIVER := $(BUILD)/tests/tools/engine_driver
$(BUILD)/tests/tools/engine_driver: tests/tools/engine_driver.c tests/tools/crash_cuts.c tests/tools/crash_cuts.h $(BUILD)/libubtrfs.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) $(LDFLAGS_BASE) -o $@ $< tests/tools/crash_cuts.c $(BUILD)/libubtrfs.a $(LIBS)
tools: $(ENGINE_DRIVER)
.PHONY: tools
# ---- end of the engine driver block ----

# ---- file API driver: tests/integration/test_file_api.py builds and runs it ----
FILEAPI_DRIVER := $(BUILD)/tests/tools/fileapi_driver
$(BUILD)/tests/tools/fileapi_driver: tests/tools/fileapi_driver.c tests/tools/crash_cuts.c tests/tools/crash_cuts.h $(BUILD)/libubtrfs.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) $(LDFLAGS_BASE) -o $@ $< tests/tools/crash_cuts.c $(BUILD)/libubtrfs.a $(LIBS)
tools: $(FILEAPI_DRIVER)
# ---- end of the file API driver block ----

# ---- space driver: tests/integration/test_enospc.py builds and runs it ----
SPACE_DRIVER := $(BUILD)/tests/tools/space_driver
$(BUILD)/tests/tools/space_driver: tests/tools/space_driver.c $(BUILD)/libubtrfs.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) $(LDFLAGS_BASE) -o $@ $< $(BUILD)/libubtrfs.a $(LIBS)
tools: $(SPACE_DRIVER)
# ---- end of the space driver block ----

# ---- threads driver: tests/integration/test_engine_threads.py builds and runs it (a library user) ----
THREADS_DRIVER := $(BUILD)/tests/tools/threads_driver
$(BUILD)/tests/tools/threads_driver: tests/tools/threads_driver.c tests/tools/crash_cuts.c tests/tools/crash_cuts.h $(BUILD)/libubtrfs.a
	@mkdir -p $(dir $@)
	$(CC) $(filter-out -Ilib,$(CFLAGS_BASE)) $(CFLAGS) $(LDFLAGS_BASE) -o $@ $< tests/tools/crash_cuts.c $(BUILD)/libubtrfs.a $(LIBS) -lpthread
tools: $(THREADS_DRIVER)
# ---- end of the threads driver block ----

# ---- block cache benchmark: cost per cached lookup, 1/2/4 threads, on a fresh mkfs.btrfs image ----
$(BUILD)/bench/bench_cache: bench/bench_cache.c $(BUILD)/libubtrfs.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) $(LDFLAGS_BASE) -o $@ $< $(BUILD)/libubtrfs.a $(LIBS) -lpthread
bench-cache: $(BUILD)/bench/bench_cache
	@set -e; d=$$(mktemp -d /tmp/ubtrfs-bench-cache-XXXXXX); trap 'rm -rf $$d' EXIT; \
	mkdir $$d/src; for i in $$(seq 3000); do printf %s $$i > $$d/src/f-$$i; done; \
	truncate -s 256M $$d/img; mkfs.btrfs -q -f -n 4096 --rootdir $$d/src $$d/img >/dev/null; \
	$(BUILD)/bench/bench_cache $$d/img 4
.PHONY: bench-cache
# ---- end of the block cache benchmark block ----
# ---- log commit driver: tests/integration/test_log_commit.py builds and runs it ----
LOGCOMMIT_DRIVER := $(BUILD)/tests/tools/logcommit_driver
$(BUILD)/tests/tools/logcommit_driver: tests/tools/logcommit_driver.c $(BUILD)/libubtrfs.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) $(LDFLAGS_BASE) -o $@ $< $(BUILD)/libubtrfs.a $(LIBS)
tools: $(LOGCOMMIT_DRIVER)
# ---- end of the log commit driver block ----

clean:
	rm -rf build build-san build-tsan build-fuzz

.PHONY: all unit integration check fuzz clean
# keep the fuzz objects between targets and runs
.SECONDARY:
-include $(LIB_OBJS:.o=.d) $(CMD_OBJS:.o=.d) $(UNIT_BINS:=.d) $(FUZZ_OBJS:.o=.d) $(FUZZ_BINS:build-fuzz/%=build-fuzz/obj/%.d) \
	$(FUZZ_HARNESS:.o=.d) $(FUZZ_CMD_OBJS:.o=.d)

# ---- nocow driver: tests/integration/test_nocow.py builds and runs it ----
NOCOW_DRIVER := $(BUILD)/tests/tools/nocow_driver
$(BUILD)/tests/tools/nocow_driver: tests/tools/nocow_driver.c $(BUILD)/libubtrfs.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) $(LDFLAGS_BASE) -o $@ $< $(BUILD)/libubtrfs.a $(LIBS)
tools: $(NOCOW_DRIVER)
# ---- end of the nocow driver block ----

# ---- tree digest: the crash tests' reader (tests/integration/test_crash_raid56.py) ----
TREE_DIGEST := $(BUILD)/tests/tools/tree_digest
$(BUILD)/tests/tools/tree_digest: tests/tools/tree_digest.c $(BUILD)/libubtrfs.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) $(LDFLAGS_BASE) -o $@ $< $(BUILD)/libubtrfs.a $(LIBS)
tools: $(TREE_DIGEST)
# ---- end of the tree digest block ----
# ---- library API: cmd/ is a library user and sees only include/ (lib/'s private headers stay out of reach) ----
$(CMD_OBJS): CFLAGS_BASE := $(filter-out -Ilib,$(CFLAGS_BASE))
# a test driver written as a library user: opens, writes and commits through include/ only
# (private: the library it depends on keeps -Ilib)
$(NOCOW_DRIVER): private CFLAGS_BASE := $(filter-out -Ilib,$(CFLAGS_BASE))
# ---- end of the library API block ----

# ---- fast inflate: libdeflate decodes the zlib extents the kernel writes ----
LIBS += -ldeflate

# ---- FUSE mount: libfuse3 for cmd/mount*.c ----
LIBS += $(shell pkg-config --libs fuse3)
# ---- end of the FUSE mount block ----

# ---- FUSE mount test helper: a device that stalls on demand (tests/integration/test_mount_parallel.py) ----
# any build directory (build-tsan too): the helper itself needs no sanitizer
%/tests/tools/slowdev: tests/tools/slowdev.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_BASE) $(CFLAGS) $(LDFLAGS_BASE) -o $@ $< $(shell pkg-config --libs fuse3)
tools: $(BUILD)/tests/tools/slowdev
# ---- end of the stalling device block ----

# ---- ThreadSanitizer build (make TSAN=1): the parallel FUSE tests run under it ----
ifeq ($(TSAN),1)
CFLAGS_BASE += -fsanitize=thread -fno-omit-frame-pointer
LDFLAGS_BASE += -fsanitize=thread
endif
.PHONY: integration-tsan
# make TSAN=1 integration-tsan: the mount's parallel tests (many readers, a stalled device, several
# writing processes) under it
integration-tsan: $(BUILD)/ubtrfs tools
	UBTRFS=$(CURDIR)/$(BUILD)/ubtrfs TSAN_OPTIONS=$${TSAN_OPTIONS:-halt_on_error=1} /usr/bin/pytest-3 -q \
		tests/integration/test_mount_parallel.py tests/integration/test_engine_threads.py \
		tests/integration/test_mount_multiproc.py $(PYTEST_ARGS)
# ---- end of the ThreadSanitizer block ----

# ---- NBD devices: libnbd for lib/dev/nbd.c ----
# loaded with dlopen by lib/dev/nbd_lib.c (only the header is needed to build)
LIBS += -ldl
# ---- end of the NBD block ----

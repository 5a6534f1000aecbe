build-clang/lib/mkfs/probe.o: lib/mkfs/probe.c include/ubtrfs/dev.h \
  include/ubtrfs/api.h include/ubtrfs/mkfs.h include/ubtrfs/format.h \
  include/ubtrfs/log.h

include/ubtrfs/dev.h:

include/ubtrfs/api.h:

include/ubtrfs/mkfs.h:

include/ubtrfs/format.h:

include/ubtrfs/log.h:

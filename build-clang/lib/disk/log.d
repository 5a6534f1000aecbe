build-clang/lib/disk/log.o: lib/disk/log.c include/ubtrfs/log.h \
  include/ubtrfs/api.h

include/ubtrfs/log.h:

include/ubtrfs/api.h:

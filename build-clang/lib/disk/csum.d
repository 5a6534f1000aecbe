build-clang/lib/disk/csum.o: lib/disk/csum.c include/ubtrfs/format.h \
  include/ubtrfs/api.h

include/ubtrfs/format.h:

include/ubtrfs/api.h:

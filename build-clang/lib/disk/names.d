build-clang/lib/disk/names.o: lib/disk/names.c include/ubtrfs/format.h \
  include/ubtrfs/api.h

include/ubtrfs/format.h:

include/ubtrfs/api.h:

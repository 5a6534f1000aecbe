build-clang/lib/disk/version.o: lib/disk/version.c \
  include/ubtrfs/version.h include/ubtrfs/api.h

include/ubtrfs/version.h:

include/ubtrfs/api.h:

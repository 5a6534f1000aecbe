build-clang/lib/mkfs/leaf.o: lib/mkfs/leaf.c lib/mkfs/mkfs_internal.h \
  include/ubtrfs/format.h include/ubtrfs/api.h

lib/mkfs/mkfs_internal.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

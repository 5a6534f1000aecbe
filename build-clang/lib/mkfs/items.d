build-clang/lib/mkfs/items.o: lib/mkfs/items.c lib/mkfs/mkfs_internal.h \
  include/ubtrfs/format.h include/ubtrfs/api.h

lib/mkfs/mkfs_internal.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

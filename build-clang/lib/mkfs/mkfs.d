build-clang/lib/mkfs/mkfs.o: lib/mkfs/mkfs.c lib/alloc/chunk_layout.h \
  lib/mkfs/mkfs_internal.h include/ubtrfs/format.h include/ubtrfs/api.h \
  include/ubtrfs/mkfs.h include/ubtrfs/dev.h include/ubtrfs/log.h \
  include/ubtrfs/volume.h lib/volume/volume_priv.h lib/dev/dev_priv.h

lib/alloc/chunk_layout.h:

lib/mkfs/mkfs_internal.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

include/ubtrfs/mkfs.h:

include/ubtrfs/dev.h:

include/ubtrfs/log.h:

include/ubtrfs/volume.h:

lib/volume/volume_priv.h:

lib/dev/dev_priv.h:

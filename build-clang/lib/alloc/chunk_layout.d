build-clang/lib/alloc/chunk_layout.o: lib/alloc/chunk_layout.c \
  lib/alloc/chunk_layout.h include/ubtrfs/format.h include/ubtrfs/api.h \
  lib/volume/volume_priv.h lib/dev/dev_priv.h include/ubtrfs/dev.h \
  include/ubtrfs/volume.h include/ubtrfs/log.h

lib/alloc/chunk_layout.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

lib/volume/volume_priv.h:

lib/dev/dev_priv.h:

include/ubtrfs/dev.h:

include/ubtrfs/volume.h:

include/ubtrfs/log.h:

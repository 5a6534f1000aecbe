build-clang/lib/alloc/chunk_remove.o: lib/alloc/chunk_remove.c \
  lib/alloc/alloc_internal.h lib/alloc/alloc.h lib/tree/tree_priv.h \
  include/ubtrfs/format.h include/ubtrfs/api.h include/ubtrfs/tree.h \
  include/ubtrfs/volume.h include/ubtrfs/dev.h include/ubtrfs/log.h \
  lib/volume/volume_priv.h lib/dev/dev_priv.h lib/alloc/free_space.h \
  lib/alloc/chunk_alloc.h lib/tree/tree_write.h lib/alloc/chunk_layout.h

lib/alloc/alloc_internal.h:

lib/alloc/alloc.h:

lib/tree/tree_priv.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

include/ubtrfs/tree.h:

include/ubtrfs/volume.h:

include/ubtrfs/dev.h:

include/ubtrfs/log.h:

lib/volume/volume_priv.h:

lib/dev/dev_priv.h:

lib/alloc/free_space.h:

lib/alloc/chunk_alloc.h:

lib/tree/tree_write.h:

lib/alloc/chunk_layout.h:

build-clang/lib/fs/chunk_rebuild.o: lib/fs/chunk_rebuild.c \
  lib/fs/fs_priv.h include/ubtrfs/fs.h include/ubtrfs/tree.h \
  include/ubtrfs/format.h include/ubtrfs/api.h include/ubtrfs/volume.h \
  include/ubtrfs/dev.h include/ubtrfs/log.h lib/tree/tree_priv.h \
  lib/volume/volume_priv.h lib/dev/dev_priv.h lib/fs/chunk_order.h \
  lib/tree/tree_check.h lib/tree/tree_write.h

lib/fs/fs_priv.h:

include/ubtrfs/fs.h:

include/ubtrfs/tree.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

include/ubtrfs/volume.h:

include/ubtrfs/dev.h:

include/ubtrfs/log.h:

lib/tree/tree_priv.h:

lib/volume/volume_priv.h:

lib/dev/dev_priv.h:

lib/fs/chunk_order.h:

lib/tree/tree_check.h:

lib/tree/tree_write.h:

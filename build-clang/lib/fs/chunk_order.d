build-clang/lib/fs/chunk_order.o: lib/fs/chunk_order.c \
  lib/fs/chunk_order.h include/ubtrfs/format.h include/ubtrfs/api.h \
  lib/fs/fs_priv.h include/ubtrfs/fs.h include/ubtrfs/tree.h \
  include/ubtrfs/volume.h include/ubtrfs/dev.h include/ubtrfs/log.h \
  lib/tree/tree_priv.h lib/volume/volume_priv.h lib/dev/dev_priv.h

lib/fs/chunk_order.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

lib/fs/fs_priv.h:

include/ubtrfs/fs.h:

include/ubtrfs/tree.h:

include/ubtrfs/volume.h:

include/ubtrfs/dev.h:

include/ubtrfs/log.h:

lib/tree/tree_priv.h:

lib/volume/volume_priv.h:

lib/dev/dev_priv.h:

build-clang/lib/tree/block.o: lib/tree/block.c include/ubtrfs/tree.h \
  include/ubtrfs/format.h include/ubtrfs/api.h include/ubtrfs/volume.h \
  include/ubtrfs/dev.h include/ubtrfs/log.h lib/tree/tree_check.h \
  lib/tree/tree_write.h lib/tree/tree_priv.h lib/volume/volume_priv.h \
  lib/dev/dev_priv.h lib/tree/cache.h

include/ubtrfs/tree.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

include/ubtrfs/volume.h:

include/ubtrfs/dev.h:

include/ubtrfs/log.h:

lib/tree/tree_check.h:

lib/tree/tree_write.h:

lib/tree/tree_priv.h:

lib/volume/volume_priv.h:

lib/dev/dev_priv.h:

lib/tree/cache.h:

build-clang/lib/txn/features.o: lib/txn/features.c lib/txn/commit.h \
  lib/tree/tree_priv.h include/ubtrfs/format.h include/ubtrfs/api.h \
  include/ubtrfs/tree.h include/ubtrfs/volume.h include/ubtrfs/dev.h \
  include/ubtrfs/log.h lib/volume/volume_priv.h lib/dev/dev_priv.h

lib/txn/commit.h:

lib/tree/tree_priv.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

include/ubtrfs/tree.h:

include/ubtrfs/volume.h:

include/ubtrfs/dev.h:

include/ubtrfs/log.h:

lib/volume/volume_priv.h:

lib/dev/dev_priv.h:

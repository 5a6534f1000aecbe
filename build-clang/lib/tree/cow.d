build-clang/lib/tree/cow.o: lib/tree/cow.c include/ubtrfs/tree.h \
  include/ubtrfs/format.h include/ubtrfs/api.h include/ubtrfs/volume.h \
  include/ubtrfs/dev.h include/ubtrfs/log.h lib/tree/tree_write.h \
  lib/tree/tree_priv.h lib/volume/volume_priv.h lib/dev/dev_priv.h

include/ubtrfs/tree.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

include/ubtrfs/volume.h:

include/ubtrfs/dev.h:

include/ubtrfs/log.h:

lib/tree/tree_write.h:

lib/tree/tree_priv.h:

lib/volume/volume_priv.h:

lib/dev/dev_priv.h:

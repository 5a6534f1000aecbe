build-clang/lib/fs/log_replay.o: lib/fs/log_replay.c lib/fs/log_replay.h \
  lib/fs/items.h lib/fs/fs_priv.h include/ubtrfs/fs.h \
  include/ubtrfs/tree.h include/ubtrfs/format.h include/ubtrfs/api.h \
  include/ubtrfs/volume.h include/ubtrfs/dev.h include/ubtrfs/log.h \
  lib/tree/tree_priv.h lib/volume/volume_priv.h lib/dev/dev_priv.h

lib/fs/log_replay.h:

lib/fs/items.h:

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

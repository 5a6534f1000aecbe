build-clang/lib/fs/fs.o: lib/fs/fs.c include/ubtrfs/fs.h \
  include/ubtrfs/tree.h include/ubtrfs/format.h include/ubtrfs/api.h \
  include/ubtrfs/volume.h include/ubtrfs/dev.h include/ubtrfs/log.h \
  lib/fs/decomp_pool.h lib/fs/fs_embed.h lib/fs/fs_priv.h \
  lib/tree/tree_priv.h lib/volume/volume_priv.h lib/dev/dev_priv.h \
  lib/fs/log_replay.h lib/fs/items.h lib/tree/roots.h \
  include/ubtrfs/rootscan.h

include/ubtrfs/fs.h:

include/ubtrfs/tree.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

include/ubtrfs/volume.h:

include/ubtrfs/dev.h:

include/ubtrfs/log.h:

lib/fs/decomp_pool.h:

lib/fs/fs_embed.h:

lib/fs/fs_priv.h:

lib/tree/tree_priv.h:

lib/volume/volume_priv.h:

lib/dev/dev_priv.h:

lib/fs/log_replay.h:

lib/fs/items.h:

lib/tree/roots.h:

include/ubtrfs/rootscan.h:

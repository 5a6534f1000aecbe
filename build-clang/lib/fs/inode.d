build-clang/lib/fs/inode.o: lib/fs/inode.c include/ubtrfs/fs.h \
  include/ubtrfs/tree.h include/ubtrfs/format.h include/ubtrfs/api.h \
  include/ubtrfs/volume.h include/ubtrfs/dev.h include/ubtrfs/log.h \
  lib/fs/fs_priv.h lib/tree/tree_priv.h lib/volume/volume_priv.h \
  lib/dev/dev_priv.h lib/fs/items.h

include/ubtrfs/fs.h:

include/ubtrfs/tree.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

include/ubtrfs/volume.h:

include/ubtrfs/dev.h:

include/ubtrfs/log.h:

lib/fs/fs_priv.h:

lib/tree/tree_priv.h:

lib/volume/volume_priv.h:

lib/dev/dev_priv.h:

lib/fs/items.h:

build-clang/lib/fs/fiemap.o: lib/fs/fiemap.c include/ubtrfs/devinfo.h \
  include/ubtrfs/volume.h include/ubtrfs/dev.h include/ubtrfs/api.h \
  include/ubtrfs/format.h include/ubtrfs/log.h include/ubtrfs/fsquery.h \
  include/ubtrfs/fs.h include/ubtrfs/tree.h lib/fs/fs_priv.h \
  lib/tree/tree_priv.h lib/volume/volume_priv.h lib/dev/dev_priv.h

include/ubtrfs/devinfo.h:

include/ubtrfs/volume.h:

include/ubtrfs/dev.h:

include/ubtrfs/api.h:

include/ubtrfs/format.h:

include/ubtrfs/log.h:

include/ubtrfs/fsquery.h:

include/ubtrfs/fs.h:

include/ubtrfs/tree.h:

lib/fs/fs_priv.h:

lib/tree/tree_priv.h:

lib/volume/volume_priv.h:

lib/dev/dev_priv.h:

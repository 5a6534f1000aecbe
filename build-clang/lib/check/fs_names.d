build-clang/lib/check/fs_names.o: lib/check/fs_names.c \
  lib/check/fs_tree.h lib/check/chunks.h lib/check/check_priv.h \
  lib/tree/tree_priv.h include/ubtrfs/format.h include/ubtrfs/api.h \
  include/ubtrfs/tree.h include/ubtrfs/volume.h include/ubtrfs/dev.h \
  include/ubtrfs/log.h lib/volume/volume_priv.h lib/dev/dev_priv.h \
  include/ubtrfs/check.h include/ubtrfs/fs.h include/ubtrfs/devinfo.h \
  include/ubtrfs/fsinfo.h

lib/check/fs_tree.h:

lib/check/chunks.h:

lib/check/check_priv.h:

lib/tree/tree_priv.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

include/ubtrfs/tree.h:

include/ubtrfs/volume.h:

include/ubtrfs/dev.h:

include/ubtrfs/log.h:

lib/volume/volume_priv.h:

lib/dev/dev_priv.h:

include/ubtrfs/check.h:

include/ubtrfs/fs.h:

include/ubtrfs/devinfo.h:

include/ubtrfs/fsinfo.h:

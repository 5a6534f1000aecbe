build-clang/lib/tree/roots.o: lib/tree/roots.c include/ubtrfs/format.h \
  include/ubtrfs/api.h lib/tree/roots.h lib/tree/tree_priv.h \
  include/ubtrfs/tree.h include/ubtrfs/volume.h include/ubtrfs/dev.h \
  include/ubtrfs/log.h lib/volume/volume_priv.h lib/dev/dev_priv.h

include/ubtrfs/format.h:

include/ubtrfs/api.h:

lib/tree/roots.h:

lib/tree/tree_priv.h:

include/ubtrfs/tree.h:

include/ubtrfs/volume.h:

include/ubtrfs/dev.h:

include/ubtrfs/log.h:

lib/volume/volume_priv.h:

lib/dev/dev_priv.h:

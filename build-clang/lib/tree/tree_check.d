build-clang/lib/tree/tree_check.o: lib/tree/tree_check.c \
  lib/tree/tree_check.h include/ubtrfs/format.h include/ubtrfs/api.h \
  lib/volume/volume_priv.h lib/dev/dev_priv.h include/ubtrfs/dev.h \
  include/ubtrfs/volume.h include/ubtrfs/log.h

lib/tree/tree_check.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

lib/volume/volume_priv.h:

lib/dev/dev_priv.h:

include/ubtrfs/dev.h:

include/ubtrfs/volume.h:

include/ubtrfs/log.h:

build-clang/lib/mkfs/options.o: lib/mkfs/options.c include/ubtrfs/mkfs.h \
  include/ubtrfs/dev.h include/ubtrfs/api.h include/ubtrfs/format.h \
  include/ubtrfs/log.h lib/volume/volume_priv.h lib/dev/dev_priv.h \
  include/ubtrfs/volume.h

include/ubtrfs/mkfs.h:

include/ubtrfs/dev.h:

include/ubtrfs/api.h:

include/ubtrfs/format.h:

include/ubtrfs/log.h:

lib/volume/volume_priv.h:

lib/dev/dev_priv.h:

include/ubtrfs/volume.h:

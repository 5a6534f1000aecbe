build-clang/lib/volume/info.o: lib/volume/info.c include/ubtrfs/devinfo.h \
  include/ubtrfs/volume.h include/ubtrfs/dev.h include/ubtrfs/api.h \
  include/ubtrfs/format.h include/ubtrfs/log.h lib/volume/volume_priv.h \
  lib/dev/dev_priv.h

include/ubtrfs/devinfo.h:

include/ubtrfs/volume.h:

include/ubtrfs/dev.h:

include/ubtrfs/api.h:

include/ubtrfs/format.h:

include/ubtrfs/log.h:

lib/volume/volume_priv.h:

lib/dev/dev_priv.h:

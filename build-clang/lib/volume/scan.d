build-clang/lib/volume/scan.o: lib/volume/scan.c include/ubtrfs/scan.h \
  include/ubtrfs/format.h include/ubtrfs/api.h include/ubtrfs/log.h \
  lib/volume/volume_internal.h lib/volume/volume_priv.h \
  lib/dev/dev_priv.h include/ubtrfs/dev.h include/ubtrfs/volume.h

include/ubtrfs/scan.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

include/ubtrfs/log.h:

lib/volume/volume_internal.h:

lib/volume/volume_priv.h:

lib/dev/dev_priv.h:

include/ubtrfs/dev.h:

include/ubtrfs/volume.h:

build-clang/lib/volume/super.o: lib/volume/super.c \
  lib/volume/volume_internal.h lib/volume/volume_priv.h \
  lib/dev/dev_priv.h include/ubtrfs/dev.h include/ubtrfs/api.h \
  include/ubtrfs/volume.h include/ubtrfs/format.h include/ubtrfs/log.h

lib/volume/volume_internal.h:

lib/volume/volume_priv.h:

lib/dev/dev_priv.h:

include/ubtrfs/dev.h:

include/ubtrfs/api.h:

include/ubtrfs/volume.h:

include/ubtrfs/format.h:

include/ubtrfs/log.h:

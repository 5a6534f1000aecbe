build-clang/lib/dev/nbd.o: lib/dev/nbd.c lib/dev/dev_priv.h \
  include/ubtrfs/dev.h include/ubtrfs/api.h lib/dev/nbd_lib.h

lib/dev/dev_priv.h:

include/ubtrfs/dev.h:

include/ubtrfs/api.h:

lib/dev/nbd_lib.h:

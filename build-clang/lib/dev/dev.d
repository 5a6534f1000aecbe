build-clang/lib/dev/dev.o: lib/dev/dev.c include/ubtrfs/dev.h \
  include/ubtrfs/api.h lib/dev/dev_priv.h

include/ubtrfs/dev.h:

include/ubtrfs/api.h:

lib/dev/dev_priv.h:

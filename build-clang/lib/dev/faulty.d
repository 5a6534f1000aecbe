build-clang/lib/dev/faulty.o: lib/dev/faulty.c include/ubtrfs/dev.h \
  include/ubtrfs/api.h lib/dev/dev_priv.h

include/ubtrfs/dev.h:

include/ubtrfs/api.h:

lib/dev/dev_priv.h:

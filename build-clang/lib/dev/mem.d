build-clang/lib/dev/mem.o: lib/dev/mem.c include/ubtrfs/dev.h \
  include/ubtrfs/api.h lib/dev/dev_priv.h

include/ubtrfs/dev.h:

include/ubtrfs/api.h:

lib/dev/dev_priv.h:

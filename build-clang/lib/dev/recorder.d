build-clang/lib/dev/recorder.o: lib/dev/recorder.c include/ubtrfs/dev.h \
  include/ubtrfs/api.h lib/dev/dev_priv.h

include/ubtrfs/dev.h:

include/ubtrfs/api.h:

lib/dev/dev_priv.h:

build-clang/cmd/main.o: cmd/main.c cmd/cmd.h include/ubtrfs/fs.h \
  include/ubtrfs/tree.h include/ubtrfs/format.h include/ubtrfs/api.h \
  include/ubtrfs/volume.h include/ubtrfs/dev.h include/ubtrfs/log.h \
  include/ubtrfs/version.h

cmd/cmd.h:

include/ubtrfs/fs.h:

include/ubtrfs/tree.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

include/ubtrfs/volume.h:

include/ubtrfs/dev.h:

include/ubtrfs/log.h:

include/ubtrfs/version.h:

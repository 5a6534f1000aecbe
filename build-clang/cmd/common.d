build-clang/cmd/common.o: cmd/common.c include/ubtrfs/dev.h \
  include/ubtrfs/api.h include/ubtrfs/engine.h include/ubtrfs/fs.h \
  include/ubtrfs/tree.h include/ubtrfs/format.h include/ubtrfs/volume.h \
  include/ubtrfs/log.h include/ubtrfs/scan.h cmd/cmd.h

include/ubtrfs/dev.h:

include/ubtrfs/api.h:

include/ubtrfs/engine.h:

include/ubtrfs/fs.h:

include/ubtrfs/tree.h:

include/ubtrfs/format.h:

include/ubtrfs/volume.h:

include/ubtrfs/log.h:

include/ubtrfs/scan.h:

cmd/cmd.h:

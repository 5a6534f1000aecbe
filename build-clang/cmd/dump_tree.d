build-clang/cmd/dump_tree.o: cmd/dump_tree.c cmd/cmd.h \
  include/ubtrfs/fs.h include/ubtrfs/tree.h include/ubtrfs/format.h \
  include/ubtrfs/api.h include/ubtrfs/volume.h include/ubtrfs/dev.h \
  include/ubtrfs/log.h cmd/print.h include/ubtrfs/devinfo.h \
  include/ubtrfs/fsinfo.h

cmd/cmd.h:

include/ubtrfs/fs.h:

include/ubtrfs/tree.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

include/ubtrfs/volume.h:

include/ubtrfs/dev.h:

include/ubtrfs/log.h:

cmd/print.h:

include/ubtrfs/devinfo.h:

include/ubtrfs/fsinfo.h:

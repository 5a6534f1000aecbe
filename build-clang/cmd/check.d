build-clang/cmd/check.o: cmd/check.c include/ubtrfs/check.h \
  include/ubtrfs/fs.h include/ubtrfs/tree.h include/ubtrfs/format.h \
  include/ubtrfs/api.h include/ubtrfs/volume.h include/ubtrfs/dev.h \
  include/ubtrfs/log.h include/ubtrfs/devinfo.h include/ubtrfs/fsinfo.h \
  include/ubtrfs/mkfs.h cmd/cmd.h cmd/print_priv.h cmd/print.h

include/ubtrfs/check.h:

include/ubtrfs/fs.h:

include/ubtrfs/tree.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

include/ubtrfs/volume.h:

include/ubtrfs/dev.h:

include/ubtrfs/log.h:

include/ubtrfs/devinfo.h:

include/ubtrfs/fsinfo.h:

include/ubtrfs/mkfs.h:

cmd/cmd.h:

cmd/print_priv.h:

cmd/print.h:

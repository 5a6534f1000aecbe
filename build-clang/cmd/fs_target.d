build-clang/cmd/fs_target.o: cmd/fs_target.c cmd/fs_target.h cmd/cmd.h \
  include/ubtrfs/fs.h include/ubtrfs/tree.h include/ubtrfs/format.h \
  include/ubtrfs/api.h include/ubtrfs/volume.h include/ubtrfs/dev.h \
  include/ubtrfs/log.h include/ubtrfs/fsquery.h cmd/ubtrfs_ioctl.h \
  include/ubtrfs/devinfo.h include/ubtrfs/engine.h \
  include/ubtrfs/fsinfo.h include/ubtrfs/fswrite.h

cmd/fs_target.h:

cmd/cmd.h:

include/ubtrfs/fs.h:

include/ubtrfs/tree.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

include/ubtrfs/volume.h:

include/ubtrfs/dev.h:

include/ubtrfs/log.h:

include/ubtrfs/fsquery.h:

cmd/ubtrfs_ioctl.h:

include/ubtrfs/devinfo.h:

include/ubtrfs/engine.h:

include/ubtrfs/fsinfo.h:

include/ubtrfs/fswrite.h:

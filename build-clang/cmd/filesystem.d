build-clang/cmd/filesystem.o: cmd/filesystem.c cmd/cmd.h \
  include/ubtrfs/fs.h include/ubtrfs/tree.h include/ubtrfs/format.h \
  include/ubtrfs/api.h include/ubtrfs/volume.h include/ubtrfs/dev.h \
  include/ubtrfs/log.h include/ubtrfs/devinfo.h include/ubtrfs/fsinfo.h \
  include/ubtrfs/scan.h cmd/fs_target.h include/ubtrfs/fsquery.h \
  cmd/ubtrfs_ioctl.h cmd/json.h

cmd/cmd.h:

include/ubtrfs/fs.h:

include/ubtrfs/tree.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

include/ubtrfs/volume.h:

include/ubtrfs/dev.h:

include/ubtrfs/log.h:

include/ubtrfs/devinfo.h:

include/ubtrfs/fsinfo.h:

include/ubtrfs/scan.h:

cmd/fs_target.h:

include/ubtrfs/fsquery.h:

cmd/ubtrfs_ioctl.h:

cmd/json.h:

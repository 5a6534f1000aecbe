build-clang/cmd/mount_subvol.o: cmd/mount_subvol.c cmd/mount.h \
  include/ubtrfs/fs.h include/ubtrfs/tree.h include/ubtrfs/format.h \
  include/ubtrfs/api.h include/ubtrfs/volume.h include/ubtrfs/dev.h \
  include/ubtrfs/log.h cmd/mount_subvol.h cmd/ubtrfs_ioctl.h \
  include/ubtrfs/devinfo.h include/ubtrfs/engine.h \
  include/ubtrfs/fsinfo.h include/ubtrfs/fsquery.h \
  include/ubtrfs/fswrite.h

cmd/mount.h:

include/ubtrfs/fs.h:

include/ubtrfs/tree.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

include/ubtrfs/volume.h:

include/ubtrfs/dev.h:

include/ubtrfs/log.h:

cmd/mount_subvol.h:

cmd/ubtrfs_ioctl.h:

include/ubtrfs/devinfo.h:

include/ubtrfs/engine.h:

include/ubtrfs/fsinfo.h:

include/ubtrfs/fsquery.h:

include/ubtrfs/fswrite.h:

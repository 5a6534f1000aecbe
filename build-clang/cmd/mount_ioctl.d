build-clang/cmd/mount_ioctl.o: cmd/mount_ioctl.c \
  /usr/include/fuse3/fuse_lowlevel.h /usr/include/fuse3/fuse_common.h \
  /usr/include/fuse3/libfuse_config.h /usr/include/fuse3/fuse_opt.h \
  /usr/include/fuse3/fuse_log.h cmd/mount.h include/ubtrfs/fs.h \
  include/ubtrfs/tree.h include/ubtrfs/format.h include/ubtrfs/api.h \
  include/ubtrfs/volume.h include/ubtrfs/dev.h include/ubtrfs/log.h \
  cmd/mount_ioctl.h cmd/mount_subvol.h cmd/ubtrfs_ioctl.h \
  include/ubtrfs/engine.h

/usr/include/fuse3/fuse_lowlevel.h:

/usr/include/fuse3/fuse_common.h:

/usr/include/fuse3/libfuse_config.h:

/usr/include/fuse3/fuse_opt.h:

/usr/include/fuse3/fuse_log.h:

cmd/mount.h:

include/ubtrfs/fs.h:

include/ubtrfs/tree.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

include/ubtrfs/volume.h:

include/ubtrfs/dev.h:

include/ubtrfs/log.h:

cmd/mount_ioctl.h:

cmd/mount_subvol.h:

cmd/ubtrfs_ioctl.h:

include/ubtrfs/engine.h:

build-clang/cmd/mount.o: cmd/mount.c /usr/include/fuse3/fuse_lowlevel.h \
  /usr/include/fuse3/fuse_common.h /usr/include/fuse3/libfuse_config.h \
  /usr/include/fuse3/fuse_opt.h /usr/include/fuse3/fuse_log.h cmd/cmd.h \
  include/ubtrfs/fs.h include/ubtrfs/tree.h include/ubtrfs/format.h \
  include/ubtrfs/api.h include/ubtrfs/volume.h include/ubtrfs/dev.h \
  include/ubtrfs/log.h cmd/mount.h include/ubtrfs/devinfo.h \
  include/ubtrfs/engine.h include/ubtrfs/fswrite.h \
  include/ubtrfs/fsinfo.h include/ubtrfs/fsquery.h

/usr/include/fuse3/fuse_lowlevel.h:

/usr/include/fuse3/fuse_common.h:

/usr/include/fuse3/libfuse_config.h:

/usr/include/fuse3/fuse_opt.h:

/usr/include/fuse3/fuse_log.h:

cmd/cmd.h:

include/ubtrfs/fs.h:

include/ubtrfs/tree.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

include/ubtrfs/volume.h:

include/ubtrfs/dev.h:

include/ubtrfs/log.h:

cmd/mount.h:

include/ubtrfs/devinfo.h:

include/ubtrfs/engine.h:

include/ubtrfs/fswrite.h:

include/ubtrfs/fsinfo.h:

include/ubtrfs/fsquery.h:

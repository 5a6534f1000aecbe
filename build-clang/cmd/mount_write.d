build-clang/cmd/mount_write.o: cmd/mount_write.c cmd/mount.h \
  include/ubtrfs/fs.h include/ubtrfs/tree.h include/ubtrfs/format.h \
  include/ubtrfs/api.h include/ubtrfs/volume.h include/ubtrfs/dev.h \
  include/ubtrfs/log.h include/ubtrfs/engine.h include/ubtrfs/fsinfo.h \
  include/ubtrfs/fswrite.h

cmd/mount.h:

include/ubtrfs/fs.h:

include/ubtrfs/tree.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

include/ubtrfs/volume.h:

include/ubtrfs/dev.h:

include/ubtrfs/log.h:

include/ubtrfs/engine.h:

include/ubtrfs/fsinfo.h:

include/ubtrfs/fswrite.h:

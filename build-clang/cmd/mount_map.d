build-clang/cmd/mount_map.o: cmd/mount_map.c cmd/mount.h \
  include/ubtrfs/fs.h include/ubtrfs/tree.h include/ubtrfs/format.h \
  include/ubtrfs/api.h include/ubtrfs/volume.h include/ubtrfs/dev.h \
  include/ubtrfs/log.h

cmd/mount.h:

include/ubtrfs/fs.h:

include/ubtrfs/tree.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

include/ubtrfs/volume.h:

include/ubtrfs/dev.h:

include/ubtrfs/log.h:

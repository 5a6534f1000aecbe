build-clang/cmd/restore.o: cmd/restore.c cmd/dirlist.h \
  include/ubtrfs/fs.h include/ubtrfs/tree.h include/ubtrfs/format.h \
  include/ubtrfs/api.h include/ubtrfs/volume.h include/ubtrfs/dev.h \
  include/ubtrfs/log.h cmd/restore.h cmd/cmd.h include/ubtrfs/devinfo.h \
  include/ubtrfs/fsinfo.h

cmd/dirlist.h:

include/ubtrfs/fs.h:

include/ubtrfs/tree.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

include/ubtrfs/volume.h:

include/ubtrfs/dev.h:

include/ubtrfs/log.h:

cmd/restore.h:

cmd/cmd.h:

include/ubtrfs/devinfo.h:

include/ubtrfs/fsinfo.h:

build-clang/cmd/restore_older.o: cmd/restore_older.c \
  include/ubtrfs/rootscan.h include/ubtrfs/fs.h include/ubtrfs/tree.h \
  include/ubtrfs/format.h include/ubtrfs/api.h include/ubtrfs/volume.h \
  include/ubtrfs/dev.h include/ubtrfs/log.h cmd/restore.h cmd/cmd.h

include/ubtrfs/rootscan.h:

include/ubtrfs/fs.h:

include/ubtrfs/tree.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

include/ubtrfs/volume.h:

include/ubtrfs/dev.h:

include/ubtrfs/log.h:

cmd/restore.h:

cmd/cmd.h:

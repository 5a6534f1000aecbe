build-clang/cmd/restore_stale.o: cmd/restore_stale.c cmd/restore.h \
  cmd/cmd.h include/ubtrfs/fs.h include/ubtrfs/tree.h \
  include/ubtrfs/format.h include/ubtrfs/api.h include/ubtrfs/volume.h \
  include/ubtrfs/dev.h include/ubtrfs/log.h include/ubtrfs/rootscan.h

cmd/restore.h:

cmd/cmd.h:

include/ubtrfs/fs.h:

include/ubtrfs/tree.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

include/ubtrfs/volume.h:

include/ubtrfs/dev.h:

include/ubtrfs/log.h:

include/ubtrfs/rootscan.h:

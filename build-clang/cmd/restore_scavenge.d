build-clang/cmd/restore_scavenge.o: cmd/restore_scavenge.c cmd/dirlist.h \
  include/ubtrfs/fs.h include/ubtrfs/tree.h include/ubtrfs/format.h \
  include/ubtrfs/api.h include/ubtrfs/volume.h include/ubtrfs/dev.h \
  include/ubtrfs/log.h cmd/restore.h cmd/cmd.h include/ubtrfs/rootscan.h

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

include/ubtrfs/rootscan.h:

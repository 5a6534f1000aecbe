build-clang/cmd/restore_out.o: cmd/restore_out.c cmd/dirlist.h \
  include/ubtrfs/fs.h include/ubtrfs/tree.h include/ubtrfs/format.h \
  include/ubtrfs/api.h include/ubtrfs/volume.h include/ubtrfs/dev.h \
  include/ubtrfs/log.h cmd/json.h cmd/restore.h cmd/cmd.h

cmd/dirlist.h:

include/ubtrfs/fs.h:

include/ubtrfs/tree.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

include/ubtrfs/volume.h:

include/ubtrfs/dev.h:

include/ubtrfs/log.h:

cmd/json.h:

cmd/restore.h:

cmd/cmd.h:

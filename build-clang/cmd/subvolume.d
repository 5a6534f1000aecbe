build-clang/cmd/subvolume.o: cmd/subvolume.c cmd/cmd.h \
  include/ubtrfs/fs.h include/ubtrfs/tree.h include/ubtrfs/format.h \
  include/ubtrfs/api.h include/ubtrfs/volume.h include/ubtrfs/dev.h \
  include/ubtrfs/log.h cmd/fs_target.h include/ubtrfs/fsquery.h \
  cmd/json.h

cmd/cmd.h:

include/ubtrfs/fs.h:

include/ubtrfs/tree.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

include/ubtrfs/volume.h:

include/ubtrfs/dev.h:

include/ubtrfs/log.h:

cmd/fs_target.h:

include/ubtrfs/fsquery.h:

cmd/json.h:

build-clang/lib/mkfs/rootdir.o: lib/mkfs/rootdir.c \
  lib/mkfs/rootdir_pipe.h include/ubtrfs/fswrite.h \
  include/ubtrfs/engine.h include/ubtrfs/dev.h include/ubtrfs/api.h \
  include/ubtrfs/fs.h include/ubtrfs/tree.h include/ubtrfs/format.h \
  include/ubtrfs/volume.h include/ubtrfs/log.h include/ubtrfs/devinfo.h \
  include/ubtrfs/fsinfo.h include/ubtrfs/mkfs.h

lib/mkfs/rootdir_pipe.h:

include/ubtrfs/fswrite.h:

include/ubtrfs/engine.h:

include/ubtrfs/dev.h:

include/ubtrfs/api.h:

include/ubtrfs/fs.h:

include/ubtrfs/tree.h:

include/ubtrfs/format.h:

include/ubtrfs/volume.h:

include/ubtrfs/log.h:

include/ubtrfs/devinfo.h:

include/ubtrfs/fsinfo.h:

include/ubtrfs/mkfs.h:

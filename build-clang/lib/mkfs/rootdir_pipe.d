build-clang/lib/mkfs/rootdir_pipe.o: lib/mkfs/rootdir_pipe.c \
  lib/mkfs/rootdir_pipe.h include/ubtrfs/fswrite.h \
  include/ubtrfs/engine.h include/ubtrfs/dev.h include/ubtrfs/api.h \
  include/ubtrfs/fs.h include/ubtrfs/tree.h include/ubtrfs/format.h \
  include/ubtrfs/volume.h include/ubtrfs/log.h

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

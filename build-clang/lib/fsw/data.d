build-clang/lib/fsw/data.o: lib/fsw/data.c lib/fsw/fsw.h \
  include/ubtrfs/format.h include/ubtrfs/api.h lib/fs/fs_priv.h \
  include/ubtrfs/fs.h include/ubtrfs/tree.h include/ubtrfs/volume.h \
  include/ubtrfs/dev.h include/ubtrfs/log.h lib/tree/tree_priv.h \
  lib/volume/volume_priv.h lib/dev/dev_priv.h include/ubtrfs/fswrite.h \
  include/ubtrfs/engine.h lib/txn/txn.h lib/tree/tree_write.h \
  lib/alloc/alloc.h lib/alloc/free_space.h lib/alloc/delayed_ref.h \
  lib/alloc/chunk_alloc.h lib/alloc/chunk_layout.h lib/txn/commit.h \
  lib/tree/roots.h lib/fs/compress.h lib/txn/backref.h

lib/fsw/fsw.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

lib/fs/fs_priv.h:

include/ubtrfs/fs.h:

include/ubtrfs/tree.h:

include/ubtrfs/volume.h:

include/ubtrfs/dev.h:

include/ubtrfs/log.h:

lib/tree/tree_priv.h:

lib/volume/volume_priv.h:

lib/dev/dev_priv.h:

include/ubtrfs/fswrite.h:

include/ubtrfs/engine.h:

lib/txn/txn.h:

lib/tree/tree_write.h:

lib/alloc/alloc.h:

lib/alloc/free_space.h:

lib/alloc/delayed_ref.h:

lib/alloc/chunk_alloc.h:

lib/alloc/chunk_layout.h:

lib/txn/commit.h:

lib/tree/roots.h:

lib/fs/compress.h:

lib/txn/backref.h:

build-clang/lib/txn/extent_tree.o: lib/txn/extent_tree.c lib/txn/txn.h \
  lib/tree/tree_priv.h include/ubtrfs/format.h include/ubtrfs/api.h \
  include/ubtrfs/tree.h include/ubtrfs/volume.h include/ubtrfs/dev.h \
  include/ubtrfs/log.h lib/volume/volume_priv.h lib/dev/dev_priv.h \
  lib/tree/tree_write.h lib/alloc/alloc.h lib/alloc/free_space.h \
  lib/alloc/delayed_ref.h lib/alloc/chunk_alloc.h \
  lib/alloc/chunk_layout.h lib/txn/commit.h lib/tree/roots.h \
  lib/fs/fs_priv.h include/ubtrfs/fs.h include/ubtrfs/engine.h \
  lib/txn/backref.h

lib/txn/txn.h:

lib/tree/tree_priv.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

include/ubtrfs/tree.h:

include/ubtrfs/volume.h:

include/ubtrfs/dev.h:

include/ubtrfs/log.h:

lib/volume/volume_priv.h:

lib/dev/dev_priv.h:

lib/tree/tree_write.h:

lib/alloc/alloc.h:

lib/alloc/free_space.h:

lib/alloc/delayed_ref.h:

lib/alloc/chunk_alloc.h:

lib/alloc/chunk_layout.h:

lib/txn/commit.h:

lib/tree/roots.h:

lib/fs/fs_priv.h:

include/ubtrfs/fs.h:

include/ubtrfs/engine.h:

lib/txn/backref.h:

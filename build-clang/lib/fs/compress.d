build-clang/lib/fs/compress.o: lib/fs/compress.c lib/fs/compress.h \
  include/ubtrfs/format.h include/ubtrfs/api.h

lib/fs/compress.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

build-clang/lib/txn/backref.o: lib/txn/backref.c lib/txn/backref.h \
  include/ubtrfs/format.h include/ubtrfs/api.h

lib/txn/backref.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

build-clang/cmd/print_util.o: cmd/print_util.c cmd/print_priv.h \
  include/ubtrfs/format.h include/ubtrfs/api.h cmd/print.h

cmd/print_priv.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

cmd/print.h:

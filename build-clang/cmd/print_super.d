build-clang/cmd/print_super.o: cmd/print_super.c cmd/print_priv.h \
  include/ubtrfs/format.h include/ubtrfs/api.h cmd/print.h

cmd/print_priv.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

cmd/print.h:

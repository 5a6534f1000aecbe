build-clang/cmd/print_item_root.o: cmd/print_item_root.c cmd/print_priv.h \
  include/ubtrfs/format.h include/ubtrfs/api.h cmd/print.h

cmd/print_priv.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

cmd/print.h:

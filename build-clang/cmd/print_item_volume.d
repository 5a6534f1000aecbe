build-clang/cmd/print_item_volume.o: cmd/print_item_volume.c \
  cmd/print_priv.h include/ubtrfs/format.h include/ubtrfs/api.h \
  cmd/print.h

cmd/print_priv.h:

include/ubtrfs/format.h:

include/ubtrfs/api.h:

cmd/print.h:

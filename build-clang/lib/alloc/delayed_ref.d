build-clang/lib/alloc/delayed_ref.o: lib/alloc/delayed_ref.c \
  lib/alloc/delayed_ref.h

lib/alloc/delayed_ref.h:

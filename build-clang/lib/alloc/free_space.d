build-clang/lib/alloc/free_space.o: lib/alloc/free_space.c \
  lib/alloc/free_space.h

lib/alloc/free_space.h:

build-clang/lib/dev/nbd_lib.o: lib/dev/nbd_lib.c lib/dev/nbd_lib.h

lib/dev/nbd_lib.h:

build-clang/cmd/json.o: cmd/json.c cmd/json.h

cmd/json.h:

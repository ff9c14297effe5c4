# SPDX-License-Identifier: MIT
# Writes the bytes of IN as a C array NAME (and NAME_size) into OUT:
#   cmake -DIN=file -DOUT=file.c -DNAME=symbol -P embed.cmake
file(READ "${IN}" hex HEX)
get_filename_component(in_name "${IN}" NAME)
string(LENGTH "${hex}" n)
math(EXPR size "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n\t"
  bytes "${bytes}")
file(WRITE "${OUT}" "/* Generated from ${in_name} by client/embed.cmake: do not edit. */
#include <stddef.h>

/* 64-byte aligned: cuModuleLoadData reads the fat binary's header in place. */
__attribute__((aligned(64))) const unsigned char ${NAME}[] = {
\t${bytes}
};
const size_t ${NAME}_size = ${size};
")

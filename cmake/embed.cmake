# Turn a file into a C source defining `const unsigned char NAME[]` and
# `const unsigned long NAME_len`. Run as: cmake -DIN=... -DOUT=... -DNAME=... -P embed.cmake
# With -DVERSION=x.y.z, "@PROJECT_VERSION@" in the file becomes that version
# (openapi.yaml's info.version: the version is written only in CMakeLists.txt).
if(DEFINED VERSION)
  file(READ "${IN}" text)
  string(REPLACE "@PROJECT_VERSION@" "${VERSION}" text "${text}")
  file(WRITE "${OUT}.in" "${text}")
  set(IN "${OUT}.in")
endif()
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" hexlen)
math(EXPR len "${hexlen} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" body "${body}")
file(WRITE "${OUT}" "/* Generated from ${IN}; do not edit. */\nconst unsigned char ${NAME}[] = {\n${body}0x00};\nconst unsigned long ${NAME}_len = ${len};\n")

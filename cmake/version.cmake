# The version lives in one place: project(VERSION) in CMakeLists.txt. From it:
# include/memtrim.h (MEMTRIM_VERSION, generated here into the build tree, the
# header every target and the -dev package use), /openapi.yaml (info.version,
# substituted when the file is embedded), /healthz and the Orthanc
# registration (both print MEMTRIM_VERSION), the SONAME's full version and the
# Debian packages (cmake/cpack.cmake). tests/e2e/test_install.py compares them.
set(MEMTRIM_GENERATED_INCLUDE "${CMAKE_BINARY_DIR}/include")
configure_file("${CMAKE_SOURCE_DIR}/include/memtrim.h.in"
               "${MEMTRIM_GENERATED_INCLUDE}/memtrim.h" @ONLY)
# memtrim.h is the public header: every target may include it.
include_directories(BEFORE "${MEMTRIM_GENERATED_INCLUDE}")

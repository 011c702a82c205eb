# cpack.cmake - Debian packages with CPack's DEB generator, one per install
# component (cmake/install.cmake): libmemtrim0, libmemtrim-dev, orthanc-memtrim.
# Build them with packaging/build-debs.sh (Debian's hardening flags, prefix
# /usr, stripped), or by hand:
#   cmake -S . -B build-deb -DCMAKE_INSTALL_PREFIX=/usr -DMEMTRIM_TESTS=OFF
#   cmake --build build-deb && (cd build-deb && cpack -G DEB)
# Depends come from dpkg-shlibdeps (libc6, libmicrohttpd12, libcjson1,
# libsqlite3-0 with their minimum versions) plus what a library cannot say:
# the plugin needs orthanc, the -dev package its library.
set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "memtrim")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_VENDOR "The memtrim authors")
set(CPACK_PACKAGE_CONTACT "memtrim maintainers <memtrim@example.org>")
set(CPACK_PACKAGE_HOMEPAGE_URL "https://github.com/memtrim/memtrim")
set(CPACK_STRIP_FILES ON)
# Files outside the prefix (/etc/orthanc, the plugin folder) need DESTDIR.
set(CPACK_SET_DESTDIR ON)
set(CPACK_PACKAGING_INSTALL_PREFIX "${CMAKE_INSTALL_PREFIX}")
if(NOT CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  message(STATUS "Debian packages want -DCMAKE_INSTALL_PREFIX=/usr (now ${CMAKE_INSTALL_PREFIX})")
endif()

set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL lib dev cli)
if(TARGET OrthancMemTrim)
  list(APPEND CPACK_COMPONENTS_ALL orthanc)
endif()
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_PRIORITY "optional")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "${CPACK_PACKAGE_HOMEPAGE_URL}")

# Descriptions: the first line is the synopsis; CPack indents the rest and
# turns empty lines into " .".
set(memtrim_about
"memtrim gives a long-running server on glibc back the heap memory it has
freed but the allocator kept (malloc_trim on a policy: periodically when
worth it, within seconds of a burst of frees, at once under memory pressure,
on request). It measures every trim and the heap, keeps the history in
SQLite and serves it over an embedded HTTP API, a dashboard and Prometheus
/metrics.")

set(CPACK_DEBIAN_LIB_PACKAGE_NAME "${MEMTRIM_PKG_lib}")
set(CPACK_DEBIAN_LIB_PACKAGE_SECTION "libs")
# shlibs (which package provides libmemtrim.so.0) and the ldconfig trigger,
# written here: CPack's GENERATE_SHLIBS is global and it would call ldconfig
# from maintainer scripts (lintian: maintscript-calls-ldconfig).
set(deb "${CMAKE_BINARY_DIR}/debian")
file(WRITE "${deb}/lib/shlibs"
     "libmemtrim ${MEMTRIM_SOVERSION} ${MEMTRIM_PKG_lib} (>= ${PROJECT_VERSION})\n")
file(WRITE "${deb}/lib/triggers" "activate-noawait ldconfig\n")
configure_file("${CMAKE_CURRENT_LIST_DIR}/debian/libmemtrim.postinst" "${deb}/lib/postinst" COPYONLY)
configure_file("${CMAKE_CURRENT_LIST_DIR}/debian/libmemtrim.postrm" "${deb}/lib/postrm" COPYONLY)
set(CPACK_DEBIAN_LIB_PACKAGE_CONTROL_EXTRA
    "${deb}/lib/shlibs;${deb}/lib/triggers;${deb}/lib/postinst;${deb}/lib/postrm")
set(CPACK_DEBIAN_LIB_DESCRIPTION
"memory trimming for long-running servers (library)
${memtrim_about}

This package holds libmemtrim.so.${MEMTRIM_SOVERSION}: load it into any
program with LD_PRELOAD (and MEMTRIM_CONFIG), or start it from a host
through its C ABI.")

set(CPACK_DEBIAN_CLI_PACKAGE_NAME "${MEMTRIM_PKG_cli}")
set(CPACK_DEBIAN_CLI_PACKAGE_SECTION "admin")
set(CPACK_DEBIAN_CLI_DESCRIPTION
"memory trimming for long-running servers (command)
${memtrim_about}

This package holds the memtrim command: memtrim trim PID and memtrim stats
PID act on a running glibc process from outside, through ptrace, stopping
one of its threads for well under a millisecond (memtrim(1)); and memtrim
agent, the node daemon that does it in every memory cgroup near its limit
(memtrim-agent.service, installed and not enabled; /etc/memtrim/agent.json).")
file(WRITE "${deb}/cli/conffiles" "${MEMTRIM_AGENT_CONFIG_DIR}/agent.json\n")
set(CPACK_DEBIAN_CLI_PACKAGE_CONTROL_EXTRA "${deb}/cli/conffiles")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME "${MEMTRIM_PKG_dev}")
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION "libdevel")
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "${MEMTRIM_PKG_lib} (= ${PROJECT_VERSION})")
set(CPACK_DEBIAN_DEV_DESCRIPTION
"memory trimming for long-running servers (development files)
${memtrim_about}

This package holds the C ABI's header (memtrim.h), the pkg-config file
(memtrim.pc) and the link to build hosts against libmemtrim.")

set(CPACK_DEBIAN_ORTHANC_PACKAGE_NAME "${MEMTRIM_PKG_orthanc}")
set(CPACK_DEBIAN_ORTHANC_PACKAGE_SECTION "science")
set(CPACK_DEBIAN_ORTHANC_PACKAGE_DEPENDS "orthanc (>= 1.10)")
set(CPACK_DEBIAN_ORTHANC_DESCRIPTION
"memory trimming plugin for Orthanc
${memtrim_about}

This package holds libOrthancMemTrim.so, linked from Orthanc's plugin folder
(/usr/share/orthanc/plugins), and its configuration, /etc/orthanc/memtrim.json
(the MemoryTrim section; API on http://127.0.0.1:8043/). Restart Orthanc
to load it.")
configure_file("${CMAKE_CURRENT_LIST_DIR}/debian/orthanc-memtrim.postinst"
               "${deb}/orthanc/postinst" COPYONLY)
configure_file("${CMAKE_CURRENT_LIST_DIR}/debian/orthanc-memtrim.postrm"
               "${deb}/orthanc/postrm" COPYONLY)
file(WRITE "${deb}/orthanc/conffiles" "${MEMTRIM_ORTHANC_CONFIG_DIR}/memtrim.json\n")
set(CPACK_DEBIAN_ORTHANC_PACKAGE_CONTROL_EXTRA
    "${deb}/orthanc/conffiles;${deb}/orthanc/postinst;${deb}/orthanc/postrm")

include(CPack)

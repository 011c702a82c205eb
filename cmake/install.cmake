# install.cmake - what `cmake --install` puts where, in Debian's layout when
# CMAKE_INSTALL_PREFIX is /usr (as the packages are built, cmake/cpack.cmake).
# Components, one Debian package each:
#   lib      libmemtrim.so.0 (C ABI + LD_PRELOAD start), MIT          libmemtrim0
#   dev      include/memtrim.h, memtrim.pc, the libmemtrim.so link     libmemtrim-dev
#   orthanc  libOrthancMemTrim.so in Orthanc's plugin folder and
#            /etc/orthanc/memtrim.json, GPL-3.0-or-later                orthanc-memtrim
#   cli      /usr/bin/memtrim (the command, cli/, and `memtrim agent`), its man page, the
#            agent's unit (memtrim-agent.service) and /etc/memtrim/agent.json, MIT  memtrim
# Each puts README, licence (Debian's copyright file) and changelog in
# share/doc/<package>/. memtrim-demo, the tests and benchmarks are not installed.
include(GNUInstallDirs)

get_target_property(MEMTRIM_SOVERSION memtrim SOVERSION)
set(MEMTRIM_PKG_lib "libmemtrim${MEMTRIM_SOVERSION}")
set(MEMTRIM_PKG_dev "libmemtrim-dev")
set(MEMTRIM_PKG_orthanc "orthanc-memtrim")
set(MEMTRIM_PKG_cli "memtrim")

set(MEMTRIM_ORTHANC_PLUGIN_DIR "/usr/share/orthanc/plugins" CACHE PATH
    "Folder Orthanc loads plugins from (Debian: the \"Plugins\" entry of /etc/orthanc/orthanc.json)")
set(MEMTRIM_ORTHANC_CONFIG_DIR "/etc/orthanc" CACHE PATH
    "Orthanc's configuration folder: memtrim.json goes beside orthanc.json")
# Debian keeps plugin binaries in /usr/lib/orthanc and links them from the
# plugin folder (/usr/share holds no architecture-dependent files).
set(MEMTRIM_ORTHANC_LIB_DIR "lib/orthanc")

set(lib_perms OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)

# libmemtrim.so.0.1.0 + libmemtrim.so.0 (lib), libmemtrim.so (dev).
install(TARGETS memtrim
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} PERMISSIONS ${lib_perms}
          COMPONENT lib NAMELINK_COMPONENT dev)
install(FILES "${MEMTRIM_GENERATED_INCLUDE}/memtrim.h"
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev)
configure_file("${CMAKE_CURRENT_LIST_DIR}/memtrim.pc.in" "${CMAKE_BINARY_DIR}/memtrim.pc" @ONLY)
install(FILES "${CMAKE_BINARY_DIR}/memtrim.pc"
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)

# The memtrim command and memtrim(1).
install(TARGETS memtrim_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT cli)
execute_process(COMMAND gzip -9nc "${CMAKE_SOURCE_DIR}/docs/memtrim.1"
                OUTPUT_FILE "${CMAKE_BINARY_DIR}/memtrim.1.gz")
install(FILES "${CMAKE_BINARY_DIR}/memtrim.1.gz" DESTINATION ${CMAKE_INSTALL_MANDIR}/man1
        PERMISSIONS ${lib_perms} COMPONENT cli)
# The node agent (docs/agent.md): its unit, installed and not enabled, and its configuration
# (a conffile, cmake/cpack.cmake). Debian's systemd reads units from /usr/lib/systemd/system.
set(MEMTRIM_AGENT_CONFIG_DIR "/etc/memtrim" CACHE PATH "Where memtrim agent's agent.json goes")
install(FILES "${CMAKE_SOURCE_DIR}/packaging/memtrim-agent.service"
        DESTINATION lib/systemd/system PERMISSIONS ${lib_perms} COMPONENT cli)
install(FILES "${CMAKE_SOURCE_DIR}/packaging/agent.json"
        DESTINATION "${MEMTRIM_AGENT_CONFIG_DIR}" PERMISSIONS OWNER_READ OWNER_WRITE COMPONENT cli)

if(TARGET OrthancMemTrim)
  install(TARGETS OrthancMemTrim
    LIBRARY DESTINATION ${MEMTRIM_ORTHANC_LIB_DIR} PERMISSIONS ${lib_perms} COMPONENT orthanc)
  # The link in the plugin folder, relative (it is resolved at install time:
  # CPack installs with its own prefix).
  install(CODE "
    set(mt_plugin_lib \"\${CMAKE_INSTALL_PREFIX}/${MEMTRIM_ORTHANC_LIB_DIR}/libOrthancMemTrim.so\")
    set(mt_plugin_dir \"${MEMTRIM_ORTHANC_PLUGIN_DIR}\")
    file(RELATIVE_PATH mt_rel \"\${mt_plugin_dir}\" \"\${mt_plugin_lib}\")
    file(MAKE_DIRECTORY \"\$ENV{DESTDIR}\${mt_plugin_dir}\")
    message(STATUS \"Installing: \$ENV{DESTDIR}\${mt_plugin_dir}/libOrthancMemTrim.so -> \${mt_rel}\")
    file(CREATE_LINK \"\${mt_rel}\" \"\$ENV{DESTDIR}\${mt_plugin_dir}/libOrthancMemTrim.so\" SYMBOLIC)
    list(APPEND CMAKE_INSTALL_MANIFEST_FILES \"\${mt_plugin_dir}/libOrthancMemTrim.so\")
  " COMPONENT orthanc)
  # The configuration, beside Orthanc's: never over an operator's own copy
  # (file(INSTALL) adds DESTDIR itself; EXISTS needs it spelled out)
  # (in the package it is a conffile, dpkg asks before replacing it).
  install(CODE "
    set(mt_dest \"\$ENV{DESTDIR}${MEMTRIM_ORTHANC_CONFIG_DIR}/memtrim.json\")
    if(EXISTS \"\${mt_dest}\")
      message(STATUS \"Keeping: \${mt_dest} (yours; the example is in the documentation)\")
    else()
      file(INSTALL \"${CMAKE_SOURCE_DIR}/examples/orthanc/memtrim.json\"
           DESTINATION \"${MEMTRIM_ORTHANC_CONFIG_DIR}\"
           PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
      list(APPEND CMAKE_INSTALL_MANIFEST_FILES \"${MEMTRIM_ORTHANC_CONFIG_DIR}/memtrim.json\")
    endif()
  " COMPONENT orthanc)
endif()

# Documentation, per package: README, Debian copyright (the licence), changelog.
string(TIMESTAMP MEMTRIM_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC) # honours SOURCE_DATE_EPOCH
configure_file("${CMAKE_CURRENT_LIST_DIR}/debian/changelog.in"
               "${CMAKE_BINARY_DIR}/debian/changelog" @ONLY)
execute_process(COMMAND gzip -9nc "${CMAKE_BINARY_DIR}/debian/changelog"
                OUTPUT_FILE "${CMAKE_BINARY_DIR}/debian/changelog.gz")
foreach(comp lib dev orthanc cli)
  set(docdir "${CMAKE_INSTALL_DATADIR}/doc/${MEMTRIM_PKG_${comp}}")
  set(copyright "${CMAKE_CURRENT_LIST_DIR}/debian/copyright")
  if(comp STREQUAL "orthanc")
    set(copyright "${CMAKE_CURRENT_LIST_DIR}/debian/copyright.orthanc")
  endif()
  install(FILES "${copyright}" DESTINATION ${docdir} RENAME copyright COMPONENT ${comp})
  install(FILES "${CMAKE_BINARY_DIR}/debian/changelog.gz" DESTINATION ${docdir} COMPONENT ${comp})
endforeach()
install(FILES "${CMAKE_SOURCE_DIR}/README.md" DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${MEMTRIM_PKG_lib}
        COMPONENT lib)
install(FILES "${CMAKE_SOURCE_DIR}/examples/systemd/memtrim-preload.conf"
        DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${MEMTRIM_PKG_lib}/examples COMPONENT lib)
install(FILES "${CMAKE_SOURCE_DIR}/README.md" DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${MEMTRIM_PKG_orthanc}
        COMPONENT orthanc)
install(FILES "${CMAKE_SOURCE_DIR}/examples/orthanc/memtrim.json"
              "${CMAKE_SOURCE_DIR}/examples/prometheus.yml"
              "${CMAKE_SOURCE_DIR}/examples/alerts.yml"
              "${CMAKE_SOURCE_DIR}/examples/grafana-dashboard.json"
        DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${MEMTRIM_PKG_orthanc}/examples COMPONENT orthanc)

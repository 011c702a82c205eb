# The rooms of core/ (docs/architecture.md, "Rooms"), and the check that their walls hold.
#
# memtrim_room(NAME FACE <headers> PUBLIC <targets> PRIVATE <targets>)
#   builds core/NAME/*.c as the static library memtrim_NAME. The folder core/NAME is that
#   target's PRIVATE include directory: a room's own files include each other freely.
#   The headers listed as FACE are linked into <build>/faces/NAME/, the target's one
#   PUBLIC include directory: that is all another target sees of the room. PUBLIC lists
#   the rooms (and folders) whose headers the face itself includes, PRIVATE those the
#   room's .c files use. A target that does not link a room cannot include its face, and
#   nothing outside a room can include one of its private headers.
file(REMOVE_RECURSE "${CMAKE_BINARY_DIR}/faces") # faces no longer listed must not linger

function(memtrim_face dir room)
  set(face "${CMAKE_BINARY_DIR}/faces/${dir}")
  file(REMOVE_RECURSE "${face}") # a header taken off the list must disappear
  file(MAKE_DIRECTORY "${face}")
  foreach(h ${ARGN})
    if(NOT EXISTS "${CMAKE_SOURCE_DIR}/core/${room}/${h}")
      message(FATAL_ERROR "room ${room}: its face names ${h}, which is not in core/${room}/")
    endif()
    file(CREATE_LINK "${CMAKE_SOURCE_DIR}/core/${room}/${h}" "${face}/${h}" SYMBOLIC)
  endforeach()
endfunction()

function(memtrim_room room)
  cmake_parse_arguments(R "" "" "FACE;PUBLIC;PRIVATE" ${ARGN})
  memtrim_face(${room} ${room} ${R_FACE})
  file(GLOB sources CONFIGURE_DEPENDS "${CMAKE_SOURCE_DIR}/core/${room}/*.c")
  add_library(memtrim_${room} STATIC ${sources})
  target_include_directories(memtrim_${room} PRIVATE "${CMAKE_SOURCE_DIR}/core/${room}"
                             PUBLIC "${CMAKE_BINARY_DIR}/faces/${room}")
  target_link_libraries(memtrim_${room} PUBLIC ${R_PUBLIC} PRIVATE ${R_PRIVATE})
  set_property(GLOBAL APPEND PROPERTY memtrim_rooms ${room})
endfunction()

# memtrim_room_probe(TARGET HEADER refuse|allow): a file that includes HEADER, checked the way
# TARGET's own sources are compiled (its include directories, those of what it links included,
# its definitions and options, C11). test_rooms checks every probe: a "refuse" probe must fail
# with "HEADER: No such file", an "allow" probe (the control: the set-up itself works) must
# pass. The probes are compiler runs (-fsyntax-only) from the test, one per target (its
# refusals asked of __has_include, cmake/rooms_check.cmake), not build targets: the build
# tool's own work per target made the test take 11 s for 45 probes.
function(memtrim_room_probe target header expect)
  string(MAKE_C_IDENTIFIER "${target}__${header}" id)
  set(dir "${CMAKE_BINARY_DIR}/room_probes")
  set(src "${dir}/${id}.c")
  file(CONFIGURE OUTPUT "${src}" CONTENT "#include \"${header}\"\nint room_probe_${id};\n")
  # The flags, as generator expressions (a transitive build property) evaluated at generate
  # time: -I... -D... and the options, one a line.
  set(inc "$<TARGET_PROPERTY:${target},INCLUDE_DIRECTORIES>")
  set(def "$<TARGET_PROPERTY:${target},COMPILE_DEFINITIONS>")
  set(opt "$<TARGET_PROPERTY:${target},COMPILE_OPTIONS>")
  file(GENERATE OUTPUT "${dir}/${id}.flags" CONTENT
       "$<$<BOOL:${inc}>:-I$<JOIN:${inc},\n-I>\n>$<$<BOOL:${def}>:-D$<JOIN:${def},\n-D>\n>$<$<BOOL:${opt}>:$<JOIN:${opt},\n>\n>")
  set_property(GLOBAL APPEND PROPERTY memtrim_room_probes "${id}=${header}=${expect}")
endfunction()

# memtrim_room_test(): the test, and beside the probes a look at the rooms that are handed
# their parts (OPAQUE: core/group, core/threads, core/pressure): none of their files names the instance's
# struct, not even as an opaque pointer (instance.h, which must, is the pattern's control).
# And agent/'s files (AGENT): no circle of calls among them (AGENT_CALLS: calls that exist,
# which the reading must see; the control agent-circle brings the old circle back).
function(memtrim_room_test)
  get_property(probes GLOBAL PROPERTY memtrim_room_probes)
  string(REPLACE ";" "," probes "${probes}")
  add_test(NAME test_rooms
           COMMAND ${CMAKE_COMMAND} -DPROBE_DIR=${CMAKE_BINARY_DIR}/room_probes -DPROBES=${probes}
                   -DCC=${CMAKE_C_COMPILER} -DSTD=${CMAKE_C_STANDARD}
                   -DOPAQUE=${CMAKE_SOURCE_DIR}/core/group,${CMAKE_SOURCE_DIR}/core/threads,${CMAKE_SOURCE_DIR}/core/pressure
                   -DINSTANCE_H=${CMAKE_SOURCE_DIR}/core/instance/instance.h
                   -DAGENT=${CMAKE_SOURCE_DIR}/agent
                   "-DAGENT_CALLS=act.c>history.c,api.c>words.c,history.c>words.c,agent.c>act.c"
                   -P "${CMAKE_SOURCE_DIR}/cmake/rooms_check.cmake")
  set_tests_properties(test_rooms PROPERTIES TIMEOUT 300)
endfunction()

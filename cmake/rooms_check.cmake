# test_rooms (cmake -P): checks every probe of cmake/rooms.cmake: an include the rooms' table
# does not allow is not found on its target's include path, and an allowed one is found and
# compiles. The probes of one target share its flags, so they are checked together: one
# compiler run (-fsyntax-only, the target's flags) asks __has_include for each refused header
# (the preprocessor's own search, the one #include makes) and includes the first allowed one;
# each further allowed header gets a run of its own, so that every allowed header still
# compiles alone. 45 runs were 0.7 s of the unit suite; a run per target is a third of that.
# PROBE_DIR: where the probes' flags are (and the checks are written); PROBES:
# "id=header=refuse|allow,..."; CC: the C compiler; STD: the C standard.
cmake_minimum_required(VERSION 3.18) # IN_LIST, in script mode too (the project's own minimum)
string(REPLACE "," ";" probes "${PROBES}")
list(LENGTH probes n)
if(n EQUAL 0)
  message(FATAL_ERROR "test_rooms: no probes given")
endif()

# Group the probes by target (an id is "<target>__<header>", the target's name first).
set(targets "")
foreach(p ${probes})
  string(REPLACE "=" ";" parts "${p}")
  list(GET parts 0 id)
  list(GET parts 1 header)
  list(GET parts 2 expect)
  string(FIND "${id}" "__" cut)
  string(SUBSTRING "${id}" 0 ${cut} target)
  if(NOT target IN_LIST targets)
    list(APPEND targets "${target}")
    set(flags_${target} "${id}")
    set(refuse_${target} "")
    set(allow_${target} "")
  endif()
  list(APPEND ${expect}_${target} "${id}=${header}")
endforeach()

set(failed "")
# check(TARGET SOURCE-TEXT ALLOWED-ID-OR-EMPTY): one compiler run; failures appended.
macro(check target text allowed)
  set(src "${PROBE_DIR}/check_${target}_${run}.c")
  file(WRITE "${src}" "${text}int room_check_${target}_${run};\n")
  math(EXPR run "${run} + 1")
  execute_process(COMMAND ${CC} -std=gnu${STD} -fsyntax-only ${flags} "${src}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  # gcc prints each #error twice (the message, then the line quoted)
  string(REGEX MATCHALL "error: #error \"room probe [A-Za-z0-9_]+: [^\n\"]*" said "${out}")
  foreach(s ${said})
    string(REPLACE "error: #error \"" "" s "${s}")
    list(APPEND failed "${s}")
  endforeach()
  string(REGEX MATCHALL "error: [^\n]*" errors "${out}")
  list(FILTER errors EXCLUDE REGEX "room probe")
  if(NOT rc EQUAL 0 AND (errors OR NOT said))
    list(APPEND failed "${allowed}: must compile and did not:\n${out}")
  endif()
endmacro()

foreach(target ${targets})
  list(GET flags_${target} 0 first)
  file(STRINGS "${PROBE_DIR}/${first}.flags" flags)
  set(run 0)
  set(text "")
  foreach(r ${refuse_${target}})
    string(REPLACE "=" ";" r "${r}")
    list(GET r 0 id)
    list(GET r 1 header)
    string(APPEND text "#if __has_include(\"${header}\")\n"
           "#error \"room probe ${id}: including ${header} is possible, and the rooms forbid it\"\n"
           "#endif\n")
    message(STATUS "refused, as it must be unless named below: ${id} (#include \"${header}\")")
  endforeach()
  set(allowed "${allow_${target}}")
  if(NOT allowed)
    check(${target} "${text}" "")
  endif()
  foreach(a ${allowed})
    string(REPLACE "=" ";" a "${a}")
    list(GET a 0 id)
    list(GET a 1 header)
    string(APPEND text "#if !__has_include(\"${header}\")\n"
           "#error \"room probe ${id}: ${header} is not found, and the rooms allow it\"\n"
           "#endif\n#include \"${header}\"\n")
    check(${target} "${text}" "${id}")
    message(STATUS "allowed, as it must be unless named below: ${id} (#include \"${header}\")")
    set(text "") # the next allowed header compiles alone
  endforeach()
endforeach()
# The rooms handed their parts (OPAQUE, folders) never name struct memtrim; INSTANCE_H must
# (the control: the pattern finds it where it is).
set(instance_re "struct[ \t]+memtrim([^_A-Za-z0-9]|$)")
file(STRINGS "${INSTANCE_H}" hits REGEX "${instance_re}")
if(NOT hits)
  list(APPEND failed "${INSTANCE_H}: the pattern for struct memtrim finds nothing there")
endif()
string(REPLACE "," ";" opaque "${OPAQUE}")
foreach(dir ${opaque})
  file(GLOB files "${dir}/*.c" "${dir}/*.h")
  if(NOT files)
    list(APPEND failed "${dir}: no source files to look at")
  endif()
  foreach(f ${files})
    file(STRINGS "${f}" hits REGEX "${instance_re}")
    if(hits)
      list(APPEND failed "${f}: names struct memtrim, which its room is never handed: ${hits}")
    endif()
  endforeach()
  list(LENGTH files nfiles)
  message(STATUS "no struct memtrim in ${dir} (${nfiles} files), as it must be")
endforeach()
if(failed)
  string(REPLACE ";" "\n" failed "${failed}")
  message(FATAL_ERROR "test_rooms: ${failed}")
endif()
list(LENGTH targets nt)
message(STATUS "test_rooms: ${n} probes of ${nt} targets as the rooms' table says")

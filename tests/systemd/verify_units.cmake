# Renders the unit templates with collcd's build path and runs systemd-analyze verify.
file(MAKE_DIRECTORY ${OUT})
get_filename_component(SBIN ${COLLCD} DIRECTORY)
file(READ ${SRC}/collcd.service.in unit)
string(REPLACE "@SBINDIR@" "${SBIN}" unit "${unit}")
string(REPLACE "@SYSCONFDIR@" "/etc" unit "${unit}")
file(WRITE ${OUT}/collcd.service "${unit}")
configure_file(${SRC}/collcd.socket ${OUT}/collcd.socket COPYONLY)
configure_file(${SRC}/collcd-admin.socket ${OUT}/collcd-admin.socket COPYONLY)
execute_process(COMMAND ${ANALYZE} verify --man=no
                  ${OUT}/collcd.service ${OUT}/collcd.socket ${OUT}/collcd-admin.socket
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
# A unit that verifies cleanly prints nothing; any complaint fails the test.
if(NOT rc EQUAL 0 OR NOT "${out}${err}" STREQUAL "")
  message(FATAL_ERROR "systemd-analyze verify reported problems")
endif()
message("units verify cleanly")

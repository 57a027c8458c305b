# Plan wire format (docs/design.md §4): generates plan_generated.h from
# schema/plan.fbs at build time and gives reshard_core the FlatBuffers headers.
#
# Only the header-only part of FlatBuffers is used (FlatBufferBuilder,
# Verifier, generated accessors), so nothing is linked: libreshard.so needs no
# runtime library beyond libc/libstdc++, and reshard_core's exported link
# interface stays free of flatbuffers targets. (Debian ships libflatbuffers as
# both a static archive and libflatbuffers.so.2; neither is needed.)
find_program(RESHARD_FLATC flatc REQUIRED)
find_package(flatbuffers CONFIG QUIET)
if(TARGET flatbuffers::flatbuffers)
  get_target_property(RESHARD_FLATBUFFERS_INCLUDE flatbuffers::flatbuffers
                      INTERFACE_INCLUDE_DIRECTORIES)
else()
  find_path(RESHARD_FLATBUFFERS_INCLUDE flatbuffers/flatbuffers.h REQUIRED)
endif()

set(RESHARD_SCHEMA ${PROJECT_SOURCE_DIR}/schema/plan.fbs)
set(RESHARD_WIRE_GEN_DIR ${CMAKE_CURRENT_BINARY_DIR}/generated)
set(RESHARD_PLAN_GENERATED ${RESHARD_WIRE_GEN_DIR}/reshard/plan_generated.h)
add_custom_command(
  OUTPUT ${RESHARD_PLAN_GENERATED}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${RESHARD_WIRE_GEN_DIR}/reshard
  COMMAND ${RESHARD_FLATC} --cpp --scoped-enums --gen-mutable -o ${RESHARD_WIRE_GEN_DIR}/reshard ${RESHARD_SCHEMA}
  DEPENDS ${RESHARD_SCHEMA}
  COMMENT "flatc: generating plan_generated.h from schema/plan.fbs"
  VERBATIM)
add_custom_target(reshard_plan_schema DEPENDS ${RESHARD_PLAN_GENERATED})
add_dependencies(reshard_core reshard_plan_schema)
# Listed as a source too so that Ninja knows every object may depend on it.
target_sources(reshard_core PRIVATE ${RESHARD_PLAN_GENERATED})
# Build tree only (the tests build malformed buffers with the generated API);
# installed consumers never see the generated header.
target_include_directories(reshard_core PUBLIC $<BUILD_INTERFACE:${RESHARD_WIRE_GEN_DIR}>)
target_include_directories(reshard_core SYSTEM PUBLIC $<BUILD_INTERFACE:${RESHARD_FLATBUFFERS_INCLUDE}>)

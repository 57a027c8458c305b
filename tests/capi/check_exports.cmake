# cmake -DLIBRARY=<libreshard.so> [-DSANITIZE=ON] -P check_exports.cmake
#
# Checks the linker interface of libreshard.so (docs/design.md §5):
#  - `nm -D --defined-only` lists only reshard_* functions (plus the symbol
#    version node RESHARD_1.x), and reshard_get_api among them;
#  - the SONAME is libreshard.so.1;
#  - DT_NEEDED names only libc, libm, libstdc++, libgcc_s and OpenSSL's
#    libcrypto (HMAC-SHA-256 of authenticated plans; dynamic, so that the
#    system's security updates reach it), and the sanitizer runtimes in a
#    sanitizer build.
find_program(NM nm REQUIRED)
find_program(READELF readelf REQUIRED)

execute_process(COMMAND ${NM} -D --defined-only ${LIBRARY}
                OUTPUT_VARIABLE symbols RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nm -D --defined-only ${LIBRARY} failed (${rc})")
endif()
string(REPLACE "\n" ";" lines "${symbols}")
set(bad "")
set(count 0)
foreach(line IN LISTS lines)
  if(line STREQUAL "")
    continue()
  endif()
  # "<address> <type> <name>[@@version]"
  string(REGEX REPLACE "^[0-9a-fA-F]* *[A-Za-z] " "" name "${line}")
  string(REGEX REPLACE "@.*$" "" name "${name}")
  if(name MATCHES "^RESHARD_[0-9]+\\.[0-9]+$")
    continue()
  elseif(name MATCHES "^reshard_[a-z0-9_]+$")
    math(EXPR count "${count} + 1")
  else()
    list(APPEND bad "${line}")
  endif()
endforeach()
if(bad)
  string(REPLACE ";" "\n  " bad "${bad}")
  message(FATAL_ERROR "${LIBRARY} exports symbols outside the C API:\n  ${bad}")
endif()
if(NOT symbols MATCHES "reshard_get_api")
  message(FATAL_ERROR "${LIBRARY} does not export reshard_get_api")
endif()
message(STATUS "exports: ${count} reshard_* symbols, nothing else")

execute_process(COMMAND ${READELF} -d ${LIBRARY} OUTPUT_VARIABLE dynamic RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "readelf -d ${LIBRARY} failed (${rc})")
endif()
if(NOT dynamic MATCHES "Library soname: \\[libreshard\\.so\\.1\\]")
  message(FATAL_ERROR "${LIBRARY}: SONAME is not libreshard.so.1:\n${dynamic}")
endif()
string(REGEX MATCHALL "Shared library: \\[[^]]*\\]" needed "${dynamic}")
set(allowed "^(libc\\.so\\.6|libm\\.so\\.6|libstdc\\+\\+\\.so\\.6|libgcc_s\\.so\\.1|libcrypto\\.so\\.3|ld-linux[-a-z0-9_.]*)$")
if(SANITIZE)
  set(allowed "^(libc\\.so\\.6|libm\\.so\\.6|libstdc\\+\\+\\.so\\.6|libgcc_s\\.so\\.1|libcrypto\\.so\\.3|ld-linux[-a-z0-9_.]*|libasan\\.so\\.[0-9]+|libubsan\\.so\\.[0-9]+)$")
endif()
foreach(entry IN LISTS needed)
  string(REGEX REPLACE "Shared library: \\[(.*)\\]" "\\1" lib "${entry}")
  if(NOT lib MATCHES "${allowed}")
    message(FATAL_ERROR "${LIBRARY} needs ${lib}; only libc, libm, libstdc++, libgcc_s and libcrypto are allowed")
  endif()
endforeach()
message(STATUS "needed: ${needed}")

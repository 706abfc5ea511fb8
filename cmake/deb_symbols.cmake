# cmake -DLIB=libsluice.so.X -DNM=nm -DSONAME=libsluice.so.0.1 -DPACKAGE=libsluice0.1
#       -DVERSION=0.1.0 -DDEV_PACKAGE=libsluice-dev -DOUT=symbols -P deb_symbols.cmake
# Debian's symbols control file of the shared library: every dynamic symbol it defines,
# each marked with VERSION, the version built. So dpkg-shlibdeps of a package built
# against this version asks for it or a later one, as the shlibs file does: never too old
# a library, if stricter than the version each symbol first appeared in (tracking that is
# for when the 0.x ABI settles; a symbol removed must come with a new SONAME). The file is
# made anew by every build, from the library itself, so it never lags behind the code.
execute_process(COMMAND ${NM} -D --defined-only ${LIB}
                OUTPUT_VARIABLE _out RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "deb_symbols: ${NM} -D --defined-only ${LIB} failed (${_rc})")
endif()
string(REPLACE "\n" ";" _lines "${_out}")
set(_syms)
foreach(_l IN LISTS _lines)
  # "0000000000012345 T sl_version": the global kinds only (T, D, B, R, V, W, i, u)
  if(_l MATCHES "^[0-9a-fA-F]* *[TDBRVWiu] ([^ ]+)$")
    list(APPEND _syms "${CMAKE_MATCH_1}")
  endif()
endforeach()
list(REMOVE_DUPLICATES _syms)
list(SORT _syms)
set(_text "${SONAME} ${PACKAGE} #MINVER#\n* Build-Depends-Package: ${DEV_PACKAGE}\n")
foreach(_s IN LISTS _syms)
  string(APPEND _text " ${_s}@Base ${VERSION}\n")
endforeach()
list(LENGTH _syms _n)
if(_n EQUAL 0)
  message(FATAL_ERROR "deb_symbols: no dynamic symbols in ${LIB}")
endif()
file(WRITE ${OUT}.tmp "${_text}")
file(RENAME ${OUT}.tmp ${OUT})

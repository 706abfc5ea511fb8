# CPACK_POST_BUILD_SCRIPTS: after cpack -G DEB made the packages. CPack adds a postinst
# and a postrm that run ldconfig to a package with a library under /usr/lib; Debian
# replaced such calls by the ldconfig trigger, which the library package declares
# (packaging/debian/triggers), and lintian warns about them (maintscript-calls-ldconfig).
# Those two scripts are taken out again: the package is unpacked with dpkg-deb -R and
# rebuilt with dpkg-deb --root-owner-group (the files' contents, modes and md5sums as
# they were). A maintainer script with anything besides the ldconfig call is kept.
if(NOT CPACK_GENERATOR STREQUAL "DEB")
  return()
endif()
find_program(_dpkg_deb dpkg-deb REQUIRED)
foreach(_deb IN LISTS CPACK_PACKAGE_FILES)
  if(NOT _deb MATCHES "\\.deb$")
    continue()
  endif()
  set(_dir "${_deb}.root")
  file(REMOVE_RECURSE "${_dir}")
  execute_process(COMMAND ${_dpkg_deb} -R "${_deb}" "${_dir}" RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "deb_postbuild: dpkg-deb -R ${_deb} failed")
  endif()
  set(_changed OFF)
  foreach(_s postinst postrm)
    if(EXISTS "${_dir}/DEBIAN/${_s}")
      file(STRINGS "${_dir}/DEBIAN/${_s}" _lines)
      set(_other OFF)
      foreach(_l IN LISTS _lines)
        string(STRIP "${_l}" _l)
        if(NOT _l STREQUAL "" AND NOT _l MATCHES "^#" AND NOT _l MATCHES "^set -e$"
           AND NOT _l MATCHES "^(if|then|fi|exit 0)" AND NOT _l MATCHES "ldconfig")
          set(_other ON)
        endif()
      endforeach()
      if(NOT _other)
        file(REMOVE "${_dir}/DEBIAN/${_s}")
        set(_changed ON)
      endif()
    endif()
  endforeach()
  if(_changed)
    execute_process(COMMAND ${_dpkg_deb} --root-owner-group -Zxz --build "${_dir}" "${_deb}"
                    OUTPUT_QUIET RESULT_VARIABLE _rc)
    if(NOT _rc EQUAL 0)
      message(FATAL_ERROR "deb_postbuild: dpkg-deb --build ${_dir} failed")
    endif()
  endif()
  file(REMOVE_RECURSE "${_dir}")
endforeach()

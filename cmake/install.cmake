# Installing loom as a library (cmake --install build [--prefix P]) and packaging it (cpack -G DEB
# in the build folder). In the usual GNUInstallDirs places:
#   bin/loom                              the CLI (loom serve included)
#   bin/loom-llama-server                 a symlink to loom: llama-server's command line (loom serve)
#   lib/libloom.so.MAJOR.MINOR.PATCH      the C API, shared (SONAME libloom.so.MAJOR; exports loom_* only)
#   lib/libloom.a                         the C API, static: every engine library merged into one archive
#   include/loom/loom.h, loom_serve.h,    the public headers (nothing from src/); loom.hpp is the
#   loom.hpp, loom_serve.hpp              header-only C++ layer over the C API; loom_serve.hpp the
#                                         in-process serving API (typed events; libloom.a only)
#   lib/cmake/loom/                       find_package(loom CONFIG): loom::loom (shared), loom::loom_static
#   lib/pkgconfig/loom.pc                 pkg-config loom (--static for the archive)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The static archive: the C API's objects and those of every engine library it links, so that a
# downstream program needs -lloom plus the system libraries only (Highway, PCRE2, threads).
set(LOOM_STATIC_PARTS loom_capi loom_api_stream loom_api loom_serve loom_speculative loom_chat loom_context loom_sample loom_kv loom_model loom_vocab
    loom_ops loom_quant loom_gguf loom_base loom_version)
set(_mri "CREATE ${CMAKE_BINARY_DIR}/install/libloom.a\n")
foreach(t ${LOOM_STATIC_PARTS})
  string(APPEND _mri "ADDLIB $<TARGET_FILE:${t}>\n")
endforeach()
string(APPEND _mri "SAVE\nEND\n")
file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/install/libloom.mri CONTENT "${_mri}")
set(_deps)
foreach(t ${LOOM_STATIC_PARTS})
  list(APPEND _deps ${t} $<TARGET_FILE:${t}>)
endforeach()
add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/install/libloom.a
  COMMAND ${CMAKE_COMMAND} -E rm -f ${CMAKE_BINARY_DIR}/install/libloom.a
  COMMAND sh -c "${CMAKE_AR} -M < ${CMAKE_BINARY_DIR}/install/libloom.mri"
  DEPENDS ${_deps} ${CMAKE_BINARY_DIR}/install/libloom.mri
  COMMENT "merging the engine's static libraries into libloom.a"
  VERBATIM)
add_custom_target(loom_static_archive ALL DEPENDS ${CMAKE_BINARY_DIR}/install/libloom.a)

install(TARGETS loom RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The symlink made beside the built loom (tools/cli/CMakeLists.txt); installed as a symlink.
install(FILES $<TARGET_FILE_DIR:loom>/loom-llama-server DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS loom_shared LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${CMAKE_BINARY_DIR}/install/libloom.a DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/loom/loom.h ${PROJECT_SOURCE_DIR}/include/loom/loom_serve.h
              ${PROJECT_SOURCE_DIR}/include/loom/loom.hpp ${PROJECT_SOURCE_DIR}/include/loom/loom_serve.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/loom)
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/CHANGELOG.md DESTINATION ${CMAKE_INSTALL_DOCDIR})

# The CMake package.
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/templates/loomConfig.cmake.in
  ${CMAKE_BINARY_DIR}/install/loomConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/loom
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_LIBDIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/install/loomConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/install/loomConfig.cmake ${CMAKE_BINARY_DIR}/install/loomConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/loom)

# pkg-config. Paths relative to the .pc file's place, so an installed tree can be moved.
file(RELATIVE_PATH LOOM_PC_TO_PREFIX "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
configure_file(${PROJECT_SOURCE_DIR}/cmake/templates/loom.pc.in ${CMAKE_BINARY_DIR}/install/loom.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/install/loom.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The .deb: its dependencies are the Debian runtime packages of the installed binaries
# (dpkg-shlibdeps: libhwy1, libpcre2-8-0, libstdc++6, libgcc-s1, libc6).
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME loom)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "loom maintainers <loom@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "fast local LLM inference on GGUF models (CLI, server, C library)")
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
include(CPack)

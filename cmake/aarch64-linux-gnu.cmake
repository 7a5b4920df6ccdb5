# Cross-compiling loom for AArch64 Linux on a Debian x86-64 host (multiarch), tests run under QEMU.
#
#   cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
#
# Needs g++-aarch64-linux-gnu, qemu-user and the :arm64 -dev packages (libhwy-dev:arm64,
# libgtest-dev:arm64, libgmock-dev:arm64, libpcre2-dev:arm64); scripts/test-arm64.sh installs them.
# There is no sysroot: the arm64 libraries live in /usr/lib/aarch64-linux-gnu (multiarch) and
# header-only packages (nlohmann-json, CLI11) are found in /usr/share and /usr/include as usual.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# find_package/find_library look in /usr/lib/aarch64-linux-gnu[/cmake/<pkg>] (hwy, GTest, ...),
# never in the host's /usr/lib/x86_64-linux-gnu.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

# Programs (pkg-config, python) are the host's; libraries, headers and packages come from the
# usual prefixes, which hold the arm64 multiarch files beside the arch-independent ones.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)

# pkg_check_modules (PCRE2) must read the arm64 .pc files, not the host's.
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")

# ctest and gtest_discover_tests run the test binaries under QEMU user-mode emulation.
# LOOM_QEMU_CPU picks the emulated CPU (cache variable, or the environment variable of the same
# name on the first configure): "max" (default) has NEON, dotprod, i8mm, SVE and SVE2;
# "cortex-a53" (ARMv8.0) has plain NEON only, without dotprod or SVE.
if(NOT DEFINED LOOM_QEMU_CPU)
  if(DEFINED ENV{LOOM_QEMU_CPU} AND NOT "$ENV{LOOM_QEMU_CPU}" STREQUAL "")
    set(LOOM_QEMU_CPU "$ENV{LOOM_QEMU_CPU}")
  else()
    set(LOOM_QEMU_CPU max)
  endif()
endif()
set(LOOM_QEMU_CPU "${LOOM_QEMU_CPU}" CACHE STRING "CPU model QEMU emulates when running tests (qemu-aarch64 -cpu help)")
set(CMAKE_CROSSCOMPILING_EMULATOR "qemu-aarch64;-cpu;${LOOM_QEMU_CPU}")

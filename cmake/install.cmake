# `cmake --install BUILD [--prefix DIR]`: the C++ package (component "cpp",
# docs/install.md): headers, libtdist.so and every layer's static library,
# the programs tdistrun, tdist-bench and tdist-trace, a relocatable CMake
# package (find_package(tdist): tdist::tdist, tdist::tdist_static) and a
# pkg-config file (tdist.pc). python/CMakeLists.txt adds the Python package
# (component "python"); src/torch_plugin/ adds the torch plugin to it.

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(TDIST_LAYERS tdist_common tdist_store tdist_rendezvous tdist_transport tdist_algorithms tdist_process_group
                 tdist_launcher tdist_mesh tdist_rpc)

# libtdist.so: every layer's archive, whole, in one shared library (the
# layers are built as position-independent code). Its users need nothing
# else on their link line: libcrypto and libbacktrace are linked into it.
file(WRITE ${PROJECT_BINARY_DIR}/tdist_shared.cc "// libtdist.so holds the layers' archives (cmake/install.cmake).\n")
add_library(tdist_shared SHARED ${PROJECT_BINARY_DIR}/tdist_shared.cc)
# (Spelled out: CMake's WHOLE_ARCHIVE feature refuses archives that also
# come in again as another layer's dependency.)
set(tdist_whole_archives)
foreach(layer IN LISTS TDIST_LAYERS)
  list(APPEND tdist_whole_archives $<TARGET_FILE:${layer}>)
endforeach()
add_dependencies(tdist_shared ${TDIST_LAYERS})
target_link_libraries(tdist_shared PRIVATE -Wl,--whole-archive ${tdist_whole_archives} -Wl,--no-whole-archive
                                           OpenSSL::Crypto Threads::Threads rt)
if(TDIST_HAVE_LIBBACKTRACE)
  target_link_libraries(tdist_shared PRIVATE backtrace)
endif()
# Only tdist's own API leaves the library (the symbols of what it links stay inside).
target_link_options(tdist_shared PRIVATE -Wl,--exclude-libs,libbacktrace.a)
target_include_directories(tdist_shared INTERFACE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                                                  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_link_libraries(tdist_shared INTERFACE Threads::Threads)
target_compile_features(tdist_shared INTERFACE cxx_std_20)
set_target_properties(tdist_shared PROPERTIES OUTPUT_NAME tdist EXPORT_NAME tdist VERSION ${PROJECT_VERSION}
                                              SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})

# The static libraries, behind one name.
add_library(tdist_static INTERFACE)
target_link_libraries(tdist_static INTERFACE ${TDIST_LAYERS})
target_compile_features(tdist_static INTERFACE cxx_std_20)

install(TARGETS tdist_shared tdist_static ${TDIST_LAYERS} EXPORT tdistTargets COMPONENT cpp
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/tdist DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT cpp)
install(TARGETS tdistrun tdist-bench tdist-trace RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT cpp)

set(TDIST_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/tdist)
install(EXPORT tdistTargets NAMESPACE tdist:: DESTINATION ${TDIST_CMAKE_DIR} COMPONENT cpp)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/tdistConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/cmake/tdistConfig.cmake
                              INSTALL_DESTINATION ${TDIST_CMAKE_DIR}
                              PATH_VARS CMAKE_INSTALL_INCLUDEDIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cmake/tdistConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cmake/tdistConfig.cmake ${PROJECT_BINARY_DIR}/cmake/tdistConfigVersion.cmake
        DESTINATION ${TDIST_CMAKE_DIR} COMPONENT cpp)
configure_file(${PROJECT_SOURCE_DIR}/cmake/tdist.pc.in ${PROJECT_BINARY_DIR}/cmake/tdist.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/cmake/tdist.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT cpp)

# `cmake --install`: hgraph's libraries, public headers and CMake package (component dev), and
# its programs with the bundled data (component programs). `cpack -G DEB` in the build
# directory makes one Debian package per component: hgraph and hgraph-dev. docs/library.md
# describes both.
include(CMakePackageConfigHelpers)

set(HG_LAYERS engine graphs models training server)
set(HG_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/hgraph)
set(HG_DATA_DIR ${CMAKE_INSTALL_DATADIR}/hgraph)

# hgraph::<layer>, plus hgraph::checkpoint: the checkpoint format alone, which hg_training links.
foreach(layer IN LISTS HG_LAYERS)
  set_target_properties(hg_${layer} PROPERTIES EXPORT_NAME ${layer})
endforeach()
set_target_properties(hg_checkpoint PROPERTIES EXPORT_NAME checkpoint)
install(TARGETS hg_engine hg_graphs hg_models hg_checkpoint hg_training hg_server EXPORT hgraphTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
install(TARGETS hgraph-serve hgraph-capture hgraph-train hgraph-convert
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT programs)

# The public headers, into include/hgraph/<layer>/ so that their "engine/tensor.h" includes work
# unchanged: every header of a layer except those whose opening comment says they are internal.
foreach(layer IN LISTS HG_LAYERS)
  file(GLOB headers ${PROJECT_SOURCE_DIR}/${layer}/*.h)
  set(public "")
  foreach(header IN LISTS headers)
    file(STRINGS ${header} opening LIMIT_COUNT 3)
    if(NOT opening MATCHES "^// Internal|[Ii]nternal to ")
      list(APPEND public ${header})
    endif()
  endforeach()
  install(FILES ${public} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/hgraph/${layer} COMPONENT dev)
endforeach()

# What the programs read by default (engine/bundled_data.h): the digits and the bundled repository.
install(FILES ${PROJECT_SOURCE_DIR}/models/data/digits.safetensors ${PROJECT_SOURCE_DIR}/models/data/LICENSE-digits.md
        DESTINATION ${HG_DATA_DIR}/data COMPONENT programs)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/models/repository/ DESTINATION ${HG_DATA_DIR}/repository
        COMPONENT programs)

install(EXPORT hgraphTargets NAMESPACE hgraph:: DESTINATION ${HG_CMAKE_DIR} COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/hgraphConfig.cmake.in ${PROJECT_BINARY_DIR}/hgraphConfig.cmake
                              INSTALL_DESTINATION ${HG_CMAKE_DIR} PATH_VARS HG_DATA_DIR)
# 0.x: a minor release may change the API, so only 0.1.* satisfies find_package(hgraph 0.1).
write_basic_package_version_file(${PROJECT_BINARY_DIR}/hgraphConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/hgraphConfig.cmake ${PROJECT_BINARY_DIR}/hgraphConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/hgraph_dnnl.cmake
        DESTINATION ${HG_CMAKE_DIR} COMPONENT dev)

set(CPACK_PACKAGE_NAME hgraph)
set(CPACK_PACKAGE_CONTACT "hgraph developers <hgraph@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "C++20 engine that trains neural networks and serves them over KServe v2")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_COMPONENTS_ALL programs dev)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PROGRAMS_PACKAGE_NAME hgraph)
set(CPACK_DEBIAN_PROGRAMS_DESCRIPTION
    "hgraph-serve (KServe v2 inference server), hgraph-capture, hgraph-train and hgraph-convert")
set(CPACK_DEBIAN_PROGRAMS_PACKAGE_SHLIBDEPS ON)  # the runtime libraries, read from the binaries
set(CPACK_DEBIAN_DEV_PACKAGE_NAME hgraph-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_DESCRIPTION "hgraph's static libraries, headers and CMake package (find_package(hgraph))")
# What hgraphConfig.cmake finds: the static libraries' public and private dependencies.
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS "hgraph (= ${PROJECT_VERSION}), libdnnl-dev, libtbb-dev, nlohmann-json3-dev, libspdlog-dev, \
libboost-dev, libcpprest-dev, libssl-dev, libonnx-dev, libprotobuf-dev, libgloo-dev, zlib1g-dev")
include(CPack)

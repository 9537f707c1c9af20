# oneDNN as the imported target hg_dnnl. Debian's dnnl-config.cmake demands OpenCL headers that
# hgraph does not use, so the library and its headers are found directly. Included by the root
# CMakeLists.txt and, installed, by hgraphConfig.cmake: hg_engine links oneDNN privately, and the
# users of a static hg_engine link it too.
if(NOT TARGET hg_dnnl)
  find_library(HG_DNNL_LIBRARY NAMES dnnl REQUIRED)
  find_path(HG_DNNL_INCLUDE oneapi/dnnl/dnnl.hpp REQUIRED)
  add_library(hg_dnnl INTERFACE IMPORTED)
  target_link_libraries(hg_dnnl INTERFACE ${HG_DNNL_LIBRARY})
  target_include_directories(hg_dnnl INTERFACE ${HG_DNNL_INCLUDE})
endif()

# Generates build_info.cpp at every build (rewritten only when the git state changed),
# so results.json names the commit the binary was built from.
set(IB_BUILD_INFO_CPP "${CMAKE_BINARY_DIR}/generated/build_info.cpp")
add_custom_target(ib_build_info_gen
  COMMAND ${CMAKE_COMMAND} -DSRC=${CMAKE_SOURCE_DIR} -DOUT=${IB_BUILD_INFO_CPP}
          -DVERSION=${PROJECT_VERSION} -DCUDA=${IB_WITH_CUDA}
          -P ${CMAKE_SOURCE_DIR}/cmake/GenBuildInfo.cmake
  BYPRODUCTS ${IB_BUILD_INFO_CPP}
  COMMENT "" VERBATIM)
# Once at configure time too, so the file exists before the first build.
execute_process(COMMAND ${CMAKE_COMMAND} -DSRC=${CMAKE_SOURCE_DIR} -DOUT=${IB_BUILD_INFO_CPP}
                        -DVERSION=${PROJECT_VERSION} -DCUDA=${IB_WITH_CUDA}
                        -P ${CMAKE_SOURCE_DIR}/cmake/GenBuildInfo.cmake)
set_source_files_properties(${IB_BUILD_INFO_CPP} PROPERTIES GENERATED TRUE)

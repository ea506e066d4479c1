// Version and commit of this binary (generated at build time by cmake/GenBuildInfo.cmake).
#pragma once

namespace ib {

const char* build_version();
const char* build_git_sha();
bool build_has_cuda();

}  // namespace ib

# Pick CUDA architectures before enable_language(CUDA) when the user gave none:
# the compute capability of the GPUs nvidia-smi sees, else 90 (H100/H200).
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "")
  set(_ib_arch "")
  find_program(IB_NVIDIA_SMI nvidia-smi)
  if(IB_NVIDIA_SMI)
    execute_process(COMMAND ${IB_NVIDIA_SMI} --query-gpu=compute_cap --format=csv,noheader
                    OUTPUT_VARIABLE _ib_caps RESULT_VARIABLE _ib_rc ERROR_QUIET
                    OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(_ib_rc EQUAL 0 AND _ib_caps)
      string(REPLACE "." "" _ib_caps "${_ib_caps}")
      string(REPLACE "\n" ";" _ib_caps "${_ib_caps}")
      list(REMOVE_DUPLICATES _ib_caps)
      set(_ib_arch "${_ib_caps}")
    endif()
  endif()
  if(NOT _ib_arch)
    set(_ib_arch 90)
  endif()
  set(CMAKE_CUDA_ARCHITECTURES "${_ib_arch}" CACHE STRING "CUDA architectures" FORCE)
endif()

/* scripts/torch_sdpa_peer.py, compiled into the binary so the torch peer rows need no path to
   the source tree (path from -DIB_TORCH_SDPA_PEER_PY); NUL-terminated: it is passed as `-c`. */
    .section .rodata
    .global ib_torch_sdpa_peer_py
ib_torch_sdpa_peer_py:
    .incbin IB_TORCH_SDPA_PEER_PY
    .byte 0
    .section .note.GNU-stack,"",@progbits

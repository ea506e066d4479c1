/* scripts/constrain_peer.py, compiled into the binary so the xgrammar/llguidance peer rows need no
   path to the source tree (path from -DIB_CONSTRAIN_PEER_PY); NUL-terminated: it is passed as `-c`. */
    .section .rodata
    .global ib_constrain_peer_py
ib_constrain_peer_py:
    .incbin IB_CONSTRAIN_PEER_PY
    .byte 0
    .section .note.GNU-stack,"",@progbits

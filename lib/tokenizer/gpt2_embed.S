/* The GPT-2 tokenizer.json.gz, compiled into the binary (path from -DIB_GPT2_TOKENIZER_GZ). */
    .section .rodata
    .global ib_gpt2_tokenizer_gz
    .global ib_gpt2_tokenizer_gz_end
    .balign 16
ib_gpt2_tokenizer_gz:
    .incbin IB_GPT2_TOKENIZER_GZ
ib_gpt2_tokenizer_gz_end:
    .byte 0
    .section .note.GNU-stack,"",@progbits

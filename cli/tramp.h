/*
 * tramp.h - the layout of the page memtrim keeps in a target (tramp.S writes it, inject.c
 * fills it): code at 0, a data block at TR_DATA, the extended state at TR_XSAVE (64-byte
 * aligned), the call's own stack below TR_STACK_TOP. Offsets only: included by assembly.
 */
#ifndef MEMTRIM_CLI_TRAMP_H
#define MEMTRIM_CLI_TRAMP_H

#define TR_MAGIC_OFF 0x400 /* "MTINJ001": a page of ours, this layout */
#define TR_DONE_CALL 0x408 /* 1: the function returned */
#define TR_DONE_ALL 0x410  /* 1: the thread left the page (only its stack is read after) */
#define TR_FUNC 0x418
#define TR_ARG0 0x420
#define TR_ARG1 0x428
#define TR_ARG2 0x430
#define TR_RESULT 0x438
#define TR_LOW_RSP 0x440 /* the thread's rsp less TR_RED_ZONE + 16: flags, then rip */
#define TR_XMASK 0x448
#define TR_ORIG_MASK 0x450
#define TR_ALL_MASK 0x458
#define TR_NAME_VMA 0x460
#define TR_MAP_LEN 0x468
#define TR_USE_FXSR 0x470
#define TR_SELF 0x478 /* the page's own address: with the magic, how the tool knows it again */
#define TR_VMA_NAME 0x480 /* 32 bytes */
#define TR_ARG3 0x4a0
#define TR_ARG4 0x4a8
#define TR_REGS 0x500     /* rax rbx rcx rdx rsi rdi rbp r8 .. r15 */
#define TR_OUT 0x600      /* the call's output buffer (mallinfo2's struct), 1 KiB */
#define TR_PATH 0xa00     /* a string argument (dlopen's path, load's JSON), 1.5 KiB */
#define TR_PATH_MAX 0x600
#define TR_XSAVE 0x1000   /* 16 KiB */
#define TR_XSAVE_SIZE 0x4000
#define TR_STACK_TOP 0x20000
#define TR_MAP_SIZE 0x20000
#define TR_RED_ZONE 128
#define TR_CODE_MAX 0x400
#define TR_MAGIC "MTINJ001"

#endif

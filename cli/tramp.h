/*
 * tramp.h - the layout of the page memtrim keeps in a target (tramp.S runs from it, inject.c
 * fills it; docs/command.md). Code at 0; a data block at TR_MAGIC_OFF; the call's output and
 * string; the raw thread's cache stand-in; then, each above a PROT_NONE guard page, the raw
 * thread's stack and thread block, and the stack of the glibc thread that makes the call.
 * Offsets only: included by assembly.
 */
#ifndef MEMTRIM_CLI_TRAMP_H
#define MEMTRIM_CLI_TRAMP_H

#define TR_CODE_MAX 0x800
#define TR_MAGIC_OFF 0x800 /* "MTINJ002": a page of ours, this layout */
#define TR_SELF 0x808      /* the page's own address: with the magic, how the tool knows it */
#define TR_FUNC 0x810
#define TR_ARG0 0x818      /* ARG0..ARG4: rdi rsi rdx rcx r8 */
#define TR_ARG1 0x820
#define TR_ARG2 0x828
#define TR_ARG3 0x830
#define TR_ARG4 0x838
#define TR_RESULT 0x840
#define TR_DONE_CALL 0x848 /* 1: the function returned (on the glibc thread) */
#define TR_T_DONE 0x850    /* 1: the taken thread left the page (restored by the tool or itself) */
#define TR_T_TID 0x858     /* the taken thread */
#define TR_CLONE_RET 0x860 /* the taken thread's clone: the raw thread's tid, or -errno */
#define TR_R_CTID 0x870    /* its tid word (struct pthread's): set by clone, cleared at its exit */
#define TR_R_TP 0x878      /* the raw thread's thread pointer (its copy of the thread block) */
#define TR_CLONE_FLAGS 0x880
#define TR_R_CREATE 0x888  /* pthread_create's return on the raw thread */
#define TR_R_DONE 0x890    /* 1: the raw thread is past pthread_create */
#define TR_P_THREAD 0x898  /* pthread_t of the glibc thread (its struct pthread, on the page) */
#define TR_P_TID 0x8a0     /* the glibc thread's tid, as it wrote it */
#define TR_ALL_MASK 0x8a8
#define TR_ORIG_MASK 0x8b0
#define TR_LOW_RSP 0x8b8   /* the taken thread's rsp less TR_RED_ZONE + 16: flags, then rip */
#define TR_NAME_VMA 0x8c0
#define TR_MAP_LEN 0x8c8
#define TR_WAIT_TS 0x8d0   /* 16 bytes: how long the taken thread waits for the tool */
#define TR_WAIT_LEFT 0x8e0 /* 16 bytes: ppoll's own copy (it writes what is left) */
#define TR_FN_ATTR_INIT 0x8f0
#define TR_FN_ATTR_STACK 0x8f8
#define TR_FN_ATTR_DETACH 0x900
#define TR_FN_CREATE 0x908
#define TR_FN_ATTR_DESTROY 0x910
#define TR_P_STACK 0x918
#define TR_P_STACK_SIZE 0x920
#define TR_MXCSR 0x928     /* the ABI's default control word for the raw thread */
#define TR_NO_GUARD 0x930  /* controls only: 1 skips the guard pages */
#define TR_KEEP_DF 0x938   /* controls only: 1 leaves the taken thread's direction flag */
#define TR_OLD_CALL 0x940  /* controls only: 1 calls on the taken thread (the old design) */
#define TR_SETXID_MASK 0x948 /* SIGSETXID's bit: the one signal the glibc thread takes */
#define TR_VMA_NAME 0x980  /* 32 bytes */
#define TR_REGS 0xa00      /* rax rbx rcx rdx rsi rdi rbp r8 .. r15 */
#define TR_KREGS 0xb00     /* the thread's user_regs_struct as the kernel is to see it again
                              (216 bytes): the watchdog gives it back if the tool dies */
#define TR_UC 0xc00       /* the ucontext the self-restore's rt_sigreturn takes (304 bytes):
                              the thread at its restart point, its mask; patched for EINTR */
#define TR_UC_SIZE 304
#define TR_EINTR_RIP 0xd30 /* where the call returns EINTR: right after its syscall */
#define TR_XS_MASK 0xd38   /* xsave's features for the frame (0: no xsave, the old restore) */
#define TR_XS_SIZE 0xd40   /* the xsave area's size, as the frame tells the kernel */
#define TR_OLD_RESTORE 0xd48 /* controls only (cmd-restore-pending): 1 skips the check */
#define TR_PENDING 0xd50   /* rt_sigpending's answer */
#define TR_ACT 0xd58       /* rt_sigaction's answer (32 bytes) */
#define TR_SS 0xd78        /* sigaltstack's answer (24 bytes; the tool writes an invalid one:
                              flags 3, which the kernel's restore of it refuses) */
#define TR_FRAME_HERE 0xd90 /* controls only (cmd-frame-on-own-stack): 1 builds the frame
                               below the red zone whatever the handler's SA_ONSTACK */
#define TR_OUT 0x1000      /* the call's output buffer (mallinfo2's struct), 1 KiB */
#define TR_PATH 0x1400     /* a string argument (dlopen's path, load's JSON), 1.5 KiB */
#define TR_PATH_MAX 0x600
#define TR_ATTR 0x1a00     /* the glibc thread's pthread_attr_t */
#define TR_FAKE_TCACHE 0x2000 /* the raw thread's tcache: empty (1 KiB) */
#define TR_T_STACK_TOP 0x3000 /* the taken thread needs no stack; a little for safety */
#define TR_GUARD1 0x7000
#define TR_R_STACK_TOP 0x18000 /* the raw thread's stack: 0x8000 .. 0x18000 */
#define TR_R_TLS_LOW 0x18000   /* its copy of the taken thread's static TLS ... */
#define TR_R_TP_OFF 0x3c000    /* ... and thread block (struct pthread) from here */
#define TR_R_TLS_HIGH 0x40000
#define TR_GUARD2 0x40000
#define TR_P_STACK_OFF 0x41000 /* the glibc thread's stack, its TLS and TCB at the top */
#define TR_MAP_SIZE 0x100000
#define TR_RED_ZONE 128
#define TR_MAGIC "MTINJ002"
/* in the ucontext (the kernel's, x86_64): the altstack, and the sigcontext's rax, rip and
 * fpstate; in user_regs_struct (TR_KREGS): rax */
#define UC_STACK 16
#define UC_RAX (40 + 104)
#define UC_RIP (40 + 128)
#define UC_FPSTATE (40 + 184)
#define KR_RAX 80
#define ERESTARTSYS 512
#define ERESTARTNOINTR 513
#define ERESTARTNOHAND 514
#define ERESTART_RESTARTBLOCK 516
#define TR_SA_RESTART 0x10000000
#define TR_SA_ONSTACK 0x08000000

#endif

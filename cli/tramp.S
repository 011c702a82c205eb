/*
 * tramp.S - the code memtrim writes into a target's page (x86_64; docs/command.md). Three
 * entry points, one per thread that runs here:
 *   mt_tramp_start   the taken thread, every signal blocked: raw system calls only. It clones
 *                    the raw thread, then waits in ppoll for the tool, which restores it from a
 *                    ptrace stop (the kernel then restarts its system call itself). Without the
 *                    tool (killed, stopped past the wait), it restores itself as the kernel
 *                    would have: a signal pending for a handler (rt_sigpending, rt_sigaction)
 *                    makes its call return EINTR, or restarts it (SA_RESTART with
 *                    -ERESTARTSYS); rt_sigreturn, from a frame on its own stack, then sets its
 *                    registers, stack, x87/SSE/AVX state and mask at once, so the signal is
 *                    delivered at its own instruction (control cmd-restore-pending: the mask
 *                    restored in the page, the handler run there, the call restarted).
 *   raw_thread       memtrim's raw thread (clone, every signal blocked, its own thread pointer:
 *                    a copy of the taken thread's thread block on the page): ABI state reset,
 *                    the guard pages, then glibc's pthread_create for the glibc thread, on a
 *                    stack of the page; then it ends (exit; CLONE_CHILD_CLEARTID says when).
 *   glibc_thread     the glibc thread (pthread_create's start routine, detached): takes
 *                    SIGSETXID (glibc's, for setuid in another thread), makes the call,
 *                    stores its result, returns; glibc's own thread exit frees the rest.
 * The layout is tramp.h's; the blob is position independent (rip-relative only).
 */
#include "tramp.h"

#define D(off) (mt_tramp_start + (off))(%rip)

    .section .rodata.mt_tramp, "a"
    .p2align 12
    .globl mt_tramp_start
    .globl mt_tramp_end
mt_tramp_start:
    /* rt_sigprocmask(SIG_SETMASK, &all, NULL, 8): the tool asked for it too (PTRACE_SETSIGMASK) */
    mov $14, %eax
    mov $2, %edi
    lea D(TR_ALL_MASK), %rsi
    xor %edx, %edx
    mov $8, %r10d
    syscall
    /* prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, page, length, name) */
    cmpq $0, D(TR_NAME_VMA)
    je 1f
    mov $157, %eax
    mov $0x53564d41, %edi
    xor %esi, %esi
    lea mt_tramp_start(%rip), %rdx
    mov D(TR_MAP_LEN), %r10
    lea D(TR_VMA_NAME), %r8
    syscall
1:
    cmpq $0, D(TR_OLD_CALL)
    jne old_call
    /* clone(flags, stack, &tid, &tid, tls): the tid word in the raw thread's block, set before
     * clone returns here (glibc's recursive locks compare it) and cleared when it exits */
    mov $56, %eax
    mov D(TR_CLONE_FLAGS), %rdi
    lea D(TR_R_STACK_TOP), %rsi
    mov D(TR_R_CTID), %rdx
    mov D(TR_R_CTID), %r10
    mov D(TR_R_TP), %r8
    syscall
    test %rax, %rax
    jz raw_thread
    mov %rax, D(TR_CLONE_RET)
wait_tool:
    /* ppoll(NULL, 0, &left, NULL, 8) until the wait is over: the tool interrupts it before */
    mov D(TR_WAIT_TS), %rax
    mov %rax, D(TR_WAIT_LEFT)
    mov D(TR_WAIT_TS + 8), %rax
    mov %rax, D(TR_WAIT_LEFT + 8)
2:
    mov $271, %eax
    xor %edi, %edi
    xor %esi, %esi
    lea D(TR_WAIT_LEFT), %rdx
    xor %r10d, %r10d
    mov $8, %r8d
    syscall
    test %rax, %rax
    jnz 2b
    /* no tool: restore ourselves, on the thread's own stack below its red zone (where its
     * flags and resume address are), as the kernel would have. A signal that came meanwhile
     * for a handler makes the call return EINTR (or restarts it: -ERESTARTSYS with
     * SA_RESTART), the handler run at the thread's own instruction: every signal stays
     * blocked until rt_sigreturn sets the thread's registers, stack and mask at once, from a
     * signal frame below the red zone (no larger than the one the kernel then builds there
     * for that handler). None: the call is restarted, the mask restored here (old_restore:
     * 16 bytes of the thread's stack, as a thread that takes no signal may have no more) */
    mov D(TR_LOW_RSP), %rsp
    cmpq $0, D(TR_OLD_RESTORE)
    jne old_restore
    cmpq $0, D(TR_XS_MASK)
    je old_restore
    mov D(TR_KREGS + KR_RAX), %r12 /* the restart code the call was interrupted with */
    cmp $-ERESTARTNOINTR, %r12 /* restarted whatever comes */
    je old_restore
    /* rt_sigpending(&set, 8): those the thread's own mask lets in, lowest first (the kernel
     * takes the thread's own queue before the process's: the same unless their handlers
     * differ in SA_RESTART) */
    mov $127, %eax
    lea D(TR_PENDING), %rdi
    mov $8, %esi
    syscall
    test %rax, %rax
    jnz old_restore
    mov D(TR_ORIG_MASK), %rbx
    not %rbx
    and D(TR_PENDING), %rbx
scan:
    test %rbx, %rbx
    jz old_restore /* no handler to run: the call is restarted, as the kernel does */
    bsf %rbx, %r14
    btr %r14, %rbx
    /* rt_sigaction(sig, NULL, &act, 8): a handler, or nothing the call would see (SIG_DFL,
     * SIG_IGN: ignored, or a stop after which the kernel restarts it; a fatal one ends all) */
    mov $13, %eax
    lea 1(%r14), %rdi
    xor %esi, %esi
    lea D(TR_ACT), %rdx
    mov $8, %r10d
    syscall
    test %rax, %rax
    jnz scan
    cmpq $1, D(TR_ACT)
    jbe scan
    mov $1, %r13d /* 1: EINTR (-ERESTARTNOHAND, -ERESTART_RESTARTBLOCK, -ERESTARTSYS) */
    cmp $-ERESTARTSYS, %r12
    jne 3f
    testl $TR_SA_RESTART, D(TR_ACT + 8)
    jz 3f
    xor %r13d, %r13d /* 0: restarted (SA_RESTART): rip and rax as in the ucontext */
3:
    /* the xsave area (64-aligned) under the stack slot, the frame under it: rt_sigreturn
     * reads the frame from rsp - 8, the ucontext at rsp. sigaltstack(NULL, &ss): the
     * thread's alternate stack, set again as it is; on it, the frame must fit above its base
     * (else the old restore). Off it, a handler with SA_ONSTACK gets the frame where the
     * kernel puts its own: from the alternate stack's top (above its base, else the old
     * restore), nothing on the thread's stack, which may have no room for it (control
     * cmd-frame-on-own-stack: below the red zone whatever the handler) */
    mov $131, %eax
    xor %edi, %edi
    lea D(TR_SS), %rsi
    syscall
    mov %rsp, %rdi /* the frame's top */
    xor %r8d, %r8d /* the base it must fit above: none */
    test %rax, %rax
    jnz 4f
    mov D(TR_SS), %r8
    testl $1, D(TR_SS + 8) /* SS_ONSTACK: on it, below the red zone */
    jnz 4f
    xor %r8d, %r8d
    cmpq $0, D(TR_FRAME_HERE)
    jne 4f
    testl $2, D(TR_SS + 8) /* SS_DISABLE: none */
    jnz 4f
    testl $TR_SA_ONSTACK, D(TR_ACT + 8)
    jz 4f
    mov D(TR_SS), %r8
    mov %r8, %rdi
    add D(TR_SS + 16), %rdi
4:
    mov %rdi, %rbx
    sub D(TR_XS_SIZE), %rbx
    sub $68, %rbx
    and $-64, %rbx
    lea -448(%rbx), %rax
    cmp %r8, %rax
    jb old_restore
    lea -440(%rbx), %rsp
    lea D(TR_UC), %rsi
    xor %ecx, %ecx
5:
    mov (%rsi,%rcx,8), %rax
    mov %rax, (%rsp,%rcx,8)
    inc %ecx
    cmp $(TR_UC_SIZE / 8), %ecx
    jb 5b
    test %r13, %r13
    jz 6f
    mov D(TR_EINTR_RIP), %rax
    mov %rax, UC_RIP(%rsp)
    movq $-4, UC_RAX(%rsp) /* -EINTR */
6:
    mov %rbx, UC_FPSTATE(%rsp)
    lea D(TR_SS), %rsi /* what sigaltstack read, or (it failed) the image's invalid one */
    xor %ecx, %ecx
7:
    mov (%rsi,%rcx,8), %rax
    mov %rax, UC_STACK(%rsp,%rcx,8)
    inc %ecx
    cmp $3, %ecx
    jb 7b
    /* the thread's own x87/SSE/AVX state (the page's code uses none), as the kernel writes it
     * in a signal frame: its software bytes, a clean header, the closing magic */
    mov D(TR_XS_SIZE), %rax
    movl $0x46505853, 464(%rbx)
    lea 4(%rax), %ecx
    movl %ecx, 468(%rbx)
    mov D(TR_XS_MASK), %rdx
    mov %rdx, 472(%rbx)
    movl %eax, 480(%rbx)
    movl $0x46505845, (%rbx,%rax)
    movl $0, 484(%rbx)
    lea 488(%rbx), %rdi
    xor %ecx, %ecx
8:
    movq $0, (%rdi,%rcx,8)
    inc %ecx
    cmp $11, %ecx
    jb 8b
    mov D(TR_XS_MASK), %rax
    mov %rax, %rdx
    shr $32, %rdx
    xsave (%rbx)
    /* from here on only the thread's stack is read: the page may be reused */
    movq $1, D(TR_T_DONE)
    mov $15, %eax
    syscall
9:
    jmp 9b /* never: rt_sigreturn does not return here (a bad frame is a SIGSEGV) */

    /* the restore without a frame: no handler to run (the call restarted), no xsave, no room
     * on the alternate stack, or the control cmd-restore-pending. A signal that comes once
     * the mask is restored (here: after the check, a few instructions) runs its handler in
     * the page, and the call is restarted */
old_restore:
    mov $14, %eax
    mov $2, %edi
    lea D(TR_ORIG_MASK), %rsi
    xor %edx, %edx
    mov $8, %r10d
    syscall
    mov D(TR_REGS + 8 * 0), %rax
    mov D(TR_REGS + 8 * 1), %rbx
    mov D(TR_REGS + 8 * 2), %rcx
    mov D(TR_REGS + 8 * 3), %rdx
    mov D(TR_REGS + 8 * 4), %rsi
    mov D(TR_REGS + 8 * 5), %rdi
    mov D(TR_REGS + 8 * 6), %rbp
    mov D(TR_REGS + 8 * 7), %r8
    mov D(TR_REGS + 8 * 8), %r9
    mov D(TR_REGS + 8 * 9), %r10
    mov D(TR_REGS + 8 * 10), %r11
    mov D(TR_REGS + 8 * 11), %r12
    mov D(TR_REGS + 8 * 12), %r13
    mov D(TR_REGS + 8 * 13), %r14
    mov D(TR_REGS + 8 * 14), %r15
    /* from here on only the thread's stack is read: the page may be reused */
    movq $1, D(TR_T_DONE)
    popfq
    ret $TR_RED_ZONE

raw_thread:
    /* the ABI's state for a call: the direction flag clear, x87 and SSE control words at
     * their defaults (clone copied the taken thread's, whatever they were) */
    cmpq $0, D(TR_KEEP_DF)
    jne 3f
    cld
    fninit
    ldmxcsr D(TR_MXCSR)
3:
    /* mprotect(guard, 4096, PROT_NONE) below each of the two stacks */
    cmpq $0, D(TR_NO_GUARD)
    jne 4f
    mov $10, %eax
    lea D(TR_GUARD1), %rdi
    mov $4096, %esi
    xor %edx, %edx
    syscall
    mov $10, %eax
    lea D(TR_GUARD2), %rdi
    mov $4096, %esi
    xor %edx, %edx
    syscall
4:
    lea D(TR_ATTR), %rdi
    call *D(TR_FN_ATTR_INIT)
    lea D(TR_ATTR), %rdi
    mov D(TR_P_STACK), %rsi
    mov D(TR_P_STACK_SIZE), %rdx
    call *D(TR_FN_ATTR_STACK)
    test %eax, %eax
    jnz 5f
    lea D(TR_ATTR), %rdi
    mov $1, %esi /* PTHREAD_CREATE_DETACHED */
    call *D(TR_FN_ATTR_DETACH)
    lea D(TR_P_THREAD), %rdi
    lea D(TR_ATTR), %rsi
    lea glibc_thread(%rip), %rdx
    xor %ecx, %ecx
    call *D(TR_FN_CREATE)
5:
    mov %rax, D(TR_R_CREATE)
    lea D(TR_ATTR), %rdi
    call *D(TR_FN_ATTR_DESTROY)
    movq $1, D(TR_R_DONE)
    /* exit(0): this thread only; the kernel clears its tid word (CLONE_CHILD_CLEARTID) */
6:
    mov $60, %eax
    xor %edi, %edi
    syscall
    jmp 6b

glibc_thread:
    sub $8, %rsp
    /* rt_sigprocmask(SIG_UNBLOCK, {SIGSETXID}, NULL, 8): glibc's setuid and the like, called
     * in any thread of the process, wait until every thread glibc started, this one included,
     * has run glibc's handler for it; every other signal stays blocked */
    mov $14, %eax
    mov $1, %edi
    lea D(TR_SETXID_MASK), %rsi
    xor %edx, %edx
    mov $8, %r10d
    syscall
    mov $186, %eax /* gettid */
    syscall
    mov %rax, D(TR_P_TID)
    cmpq $0, D(TR_KEEP_DF)
    jne 7f
    cld
7:
    call do_call
    add $8, %rsp
    xor %eax, %eax
    ret

    /* the call, its result and its done flag (from a 16-aligned stack, as any call) */
do_call:
    sub $8, %rsp
    mov D(TR_ARG0), %rdi
    mov D(TR_ARG1), %rsi
    mov D(TR_ARG2), %rdx
    mov D(TR_ARG3), %rcx
    mov D(TR_ARG4), %r8
    xor %eax, %eax
    call *D(TR_FUNC)
    mov %rax, D(TR_RESULT)
    movq $1, D(TR_DONE_CALL)
    add $8, %rsp
    ret

    /* controls only (cmd-call-on-taken-thread): the call made on the taken thread itself, on
     * the page's stack, as before the raw thread existed; then the same wait for the tool */
old_call:
    lea D(TR_R_STACK_TOP), %rsp
    call do_call
    jmp wait_tool
mt_tramp_end:
    .section .note.GNU-stack, "", @progbits

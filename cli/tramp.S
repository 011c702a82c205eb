/*
 * tramp.S - the code memtrim writes into a target's page (x86_64; docs/command.md). Three
 * entry points, one per thread that runs here:
 *   mt_tramp_start   the taken thread, every signal blocked: raw system calls only. It clones
 *                    the raw thread, then waits in ppoll for the tool, which restores it from a
 *                    ptrace stop (the kernel then restarts its system call itself). Without the
 *                    tool (killed, stopped past the wait), it restores itself: its mask on its
 *                    own stack, its registers, and back to its restart point.
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
    /* no tool: restore ourselves. The stack first (the thread's own, below its red zone, where
     * its flags and resume address are), so that a handler the mask lets in runs there */
    mov D(TR_LOW_RSP), %rsp
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

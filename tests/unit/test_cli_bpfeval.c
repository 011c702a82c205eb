/*
 * test_cli_bpfeval.c - the memtrim command's seccomp interpreter (cli/bpfeval.c) against the
 * kernel's own: random classic-BPF filters (loads of nr, arch and the arguments, immediates,
 * scratch memory, every ALU operation, TAX/TXA, every conditional jump on K and X, returns
 * along the way), each installed in a forked child that then makes getppid() with chosen
 * arguments. Each RET K returns ERRNO with its own number (or ALLOW), so the errno says which
 * return the kernel took; the interpreter must name the same one. With some arguments unknown,
 * an ALLOW verdict must hold for every value: the kernel is asked with 16, most of them the
 * program's own constants or next to one. One thread
 * (and its children); no locks.
 */
#include "harness.h"

#include "bpfeval.h"

#include <errno.h>
#include <linux/audit.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/wait.h>

/* programs per case: an eighth under valgrind (each fork there costs ~50 ms) */
#define PROGS (harness_under_valgrind() ? 50 : 400)
#define NR_CALL 110 /* getppid: it ignores its arguments */
#define TRIES 16

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

/* A constant: often one of the call's own words, so that equal branches are taken. */
static uint32_t konst(const struct bpf_call *c)
{
    return rnd() % 2 ? c->word[rnd() % 16] + rnd() % 3 - 1 : rnd();
}

static const uint16_t alu_ops[] = {BPF_ADD, BPF_SUB, BPF_MUL, BPF_OR, BPF_AND, BPF_XOR,
                                   BPF_LSH, BPF_RSH, BPF_DIV, BPF_NEG};
static const uint16_t jmp_ops[] = {BPF_JEQ, BPF_JGT, BPF_JGE, BPF_JSET};

/* A program the kernel's checker accepts: any call but getppid allowed, scratch memory
 * stored first, returns last. */
static unsigned gen(struct sock_filter *p, const struct bpf_call *c)
{
    unsigned n = 0, body = 4 + rnd() % 40, total = 20 + body + 3;
    /* the child's own write and exit pass: the program judges getppid alone */
    p[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0);
    p[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NR_CALL, 1, 0);
    p[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    p[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_IMM, rnd() % 7);
    for (unsigned i = 0; i < 16; i++)
        p[n++] = (struct sock_filter)BPF_STMT(BPF_ST, i);
    while (n < 20 + body) {
        unsigned room = total - n - 2, kind = rnd() % 10;
        uint32_t k = konst(c);
        if (kind == 0) {
            static const unsigned words[] = {0, 1, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
            p[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                                  4 * words[rnd() % 14]);
        } else if (kind == 1) {
            p[n++] = (struct sock_filter)BPF_STMT((rnd() % 2 ? BPF_LD : BPF_LDX) | BPF_IMM, k);
        } else if (kind == 2) {
            uint16_t op = alu_ops[rnd() % 10];
            if (op == BPF_LSH || op == BPF_RSH)
                k %= 32;
            if (op == BPF_DIV && k == 0)
                k = 3;
            p[n++] = (struct sock_filter)BPF_STMT(BPF_ALU | op | BPF_K, k);
        } else if (kind == 3) { /* on X: division by a zero X returns 0, KILL_THREAD: not here */
            p[n++] = (struct sock_filter)BPF_STMT(BPF_ALU | alu_ops[rnd() % 6] | BPF_X, 0);
        } else if (kind == 4) {
            p[n++] = (struct sock_filter)BPF_STMT(BPF_MISC | (rnd() % 2 ? BPF_TAX : BPF_TXA), 0);
        } else if (kind == 5) {
            p[n++] = (struct sock_filter)BPF_STMT((rnd() % 2 ? BPF_ST : BPF_STX), rnd() % 16);
        } else if (kind == 6) {
            p[n++] = (struct sock_filter)BPF_STMT((rnd() % 2 ? BPF_LD : BPF_LDX) | BPF_MEM,
                                                  rnd() % 16);
        } else if (kind == 7 && room > 0) {
            p[n++] = (struct sock_filter)BPF_STMT(BPF_JMP | BPF_JA, rnd() % (room < 4 ? room : 4));
        } else if (kind == 8) {
            p[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (1000 + n));
        } else {
            unsigned jt = rnd() % (room + 1 < 8 ? room + 1 : 8);
            unsigned jf = rnd() % (room + 1 < 8 ? room + 1 : 8);
            p[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | jmp_ops[rnd() % 4] |
                                                  (rnd() % 3 ? BPF_K : BPF_X), k, jt, jf);
        }
    }
    p[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    p[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 2000);
    p[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    return n;
}

/* The kernel's answer to getppid(args) under prog: 0 allowed, the errno, -1 when the filter
 * was refused (EINVAL), -2 when the child did not exit normally. */
static int kernel_says(const struct sock_filter *prog, unsigned len, const uint64_t args[6])
{
    int pipefd[2];
    if (pipe(pipefd) != 0)
        return -2;
    pid_t child = fork();
    if (child == 0) {
        struct sock_fprog fp = {(unsigned short)len, (struct sock_filter *)prog};
        int r = 0;
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
            prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fp) != 0)
            r = -1;
        else if (syscall(NR_CALL, args[0], args[1], args[2], args[3], args[4], args[5]) < 0)
            r = errno;
        if (write(pipefd[1], &r, sizeof r) != (ssize_t)sizeof r)
            _exit(2);
        _exit(0);
    }
    close(pipefd[1]);
    int r = -2, status = 0;
    if (child < 0 || read(pipefd[0], &r, sizeof r) != (ssize_t)sizeof r)
        r = -2;
    close(pipefd[0]);
    if (child > 0)
        waitpid(child, &status, 0);
    return r;
}

static void call_of(struct bpf_call *c, const uint64_t args[6])
{
    memset(c, 0, sizeof *c);
    c->word[0] = NR_CALL;
    c->word[1] = AUDIT_ARCH_X86_64;
    for (int i = 0; i < 6; i++) {
        c->word[4 + 2 * i] = (uint32_t)args[i];
        c->word[5 + 2 * i] = (uint32_t)(args[i] >> 32);
    }
}

static uint64_t arg(void)
{
    return rnd() % 4 ? rnd() % 8 : ((uint64_t)rnd() << 32) | rnd();
}

/* A random call and a program for it: the program's length. */
static unsigned random_case(struct sock_filter *prog, struct bpf_call *c, uint64_t args[6])
{
    for (int a = 0; a < 6; a++)
        args[a] = arg();
    call_of(c, args);
    return gen(prog, c);
}

static void test_the_interpreter_takes_the_kernels_return(void)
{
    static struct sock_filter prog[128];
    int compared = 0, refused = 0;
    for (int i = 0; i < PROGS; i++) {
        uint64_t args[6];
        struct bpf_call c;
        unsigned len = random_case(prog, &c, args);
        int k = kernel_says(prog, len, args);
        if (k == -1) {
            refused++;
            continue;
        }
        uint32_t action;
        int v = bpf_eval(prog, len, &c, &action);
        CHECK_MSG(k >= 0, "program %d: the child did not report (%d)", i, k);
        if (k == 0)
            CHECK_MSG(v == BPF_ALLOW, "program %d: the kernel allowed, the interpreter says %d "
                      "(action %#x)", i, v, action);
        else
            CHECK_MSG(v == BPF_DENY && action == (SECCOMP_RET_ERRNO | (uint32_t)k),
                      "program %d: the kernel returned errno %d, the interpreter %d (%#x)", i, k,
                      v, action);
        compared++;
    }
    printf("%d programs compared with the kernel, %d refused by its checker\n", compared,
           refused);
    CHECK_MSG(compared >= PROGS * 9 / 10, "only %d of %d programs compared", compared, PROGS);
}

/* Unknown arguments: an ALLOW verdict must be the kernel's for every value tried. */
/* A value for an unknown argument that a program's comparisons may tell apart: one of its
 * constants, next to one, or any. */
static uint64_t pointed_arg(const struct sock_filter *p, unsigned len)
{
    uint32_t lo = p[rnd() % len].k + rnd() % 3 - 1, hi = rnd() % 2 ? 0 : p[rnd() % len].k;
    return rnd() % 4 ? ((uint64_t)hi << 32) | lo : arg();
}

/* What seccomp's checker refuses (BPF_MOD, a load from scratch memory never stored) the
 * interpreter does not run either. */
static void test_what_seccomp_refuses_is_invalid(void)
{
    struct sock_filter mod[] = {BPF_STMT(BPF_ALU | BPF_MOD | BPF_K, 3),
                                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
    struct sock_filter ind[] = {BPF_STMT(BPF_LD | BPF_W | BPF_IND, 0),
                                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
    struct sock_filter odd[] = {BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 2),
                                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
    struct sock_filter out[] = {BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 5, 0),
                                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
    struct bpf_call c;
    uint64_t args[6] = {0};
    uint32_t action;
    call_of(&c, args);
    CHECK_EQ_INT(kernel_says(mod, 2, args), -1);
    CHECK_EQ_INT(bpf_eval(mod, 2, &c, &action), BPF_INVALID);
    CHECK_EQ_INT(bpf_eval(ind, 2, &c, &action), BPF_INVALID);
    CHECK_EQ_INT(bpf_eval(odd, 2, &c, &action), BPF_INVALID);
    CHECK_EQ_INT(bpf_eval(out, 2, &c, &action), BPF_INVALID);
}

static void test_an_allow_over_unknown_words_holds_for_any_value(void)
{
    static struct sock_filter prog[128];
    int allowed = 0;
    for (int i = 0; i < 3 * PROGS; i++) {
        uint64_t args[6];
        struct bpf_call c;
        unsigned len = random_case(prog, &c, args);
        unsigned unknown_args = rnd() % 64;
        for (int a = 0; a < 6; a++)
            if (unknown_args >> a & 1)
                c.unknown |= (uint16_t)(3u << (4 + 2 * a));
        uint32_t action;
        if (bpf_eval(prog, len, &c, &action) != BPF_ALLOW)
            continue;
        allowed++;
        for (int tries = 0; tries < TRIES; tries++) {
            uint64_t other[6];
            for (int a = 0; a < 6; a++)
                other[a] = unknown_args >> a & 1 ? pointed_arg(prog, len) : args[a];
            int k = kernel_says(prog, len, other);
            CHECK_MSG(k == 0 || k == -1, "program %d: allowed for any value of args %#x, the "
                      "kernel returned errno %d for one", i, unknown_args, k);
        }
    }
    printf("%d programs allowed with unknown arguments, each tried %d times\n", allowed, TRIES);
    CHECK_MSG(allowed >= 20, "only %d programs allowed", allowed);
}

int main(void)
{
    RUN(test_the_interpreter_takes_the_kernels_return);
    RUN(test_what_seccomp_refuses_is_invalid);
    RUN(test_an_allow_over_unknown_words_holds_for_any_value);
    return harness_end();
}

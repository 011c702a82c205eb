/*
 * bpfeval.c - classic BPF as the kernel's seccomp runs it (bpfeval.h), over a system call
 * whose unknown words are tainted: a jump on a tainted value follows both ways, so "allow"
 * means every value allows. Only what seccomp_check_filter accepts is run; anything else is
 * invalid. Bounded: jumps only go forward, each path is at most len steps, and all paths
 * together at most STEP_BUDGET. No state, no locks; the tool's one thread (and the fuzzer).
 */
#include "bpfeval.h"

#include "../common/control.h"

#include <linux/seccomp.h>
#include <string.h>

#define STEP_BUDGET (1u << 16)
#define PENDING_MAX 512

struct regs {
    uint32_t a, x, m[BPF_MEMWORDS];
    uint32_t taint; /* bit 0: a, bit 1: x, bit 2 + i: m[i] */
    unsigned pc;
};

#define T_A 1u
#define T_X 2u
#define T_M(i) (4u << (i))

const char *bpf_action_name(uint32_t action)
{
    switch (action & SECCOMP_RET_ACTION_FULL) {
    case SECCOMP_RET_KILL_PROCESS:
        return "KILL_PROCESS";
    case SECCOMP_RET_KILL_THREAD:
        return "KILL_THREAD";
    case SECCOMP_RET_TRAP:
        return "TRAP (SIGSYS)";
    case SECCOMP_RET_ERRNO:
        return "ERRNO";
    case SECCOMP_RET_USER_NOTIF:
        return "USER_NOTIF";
    case SECCOMP_RET_TRACE:
        return "TRACE";
    case SECCOMP_RET_LOG:
        return "LOG";
    case SECCOMP_RET_ALLOW:
        return "ALLOW";
    default:
        return "an unknown action (the kernel kills the process)";
    }
}

/* SECCOMP_RET_ALLOW; lenient, also a failed call (ERRNO; TRACE, which without a tracer
 * fails it with ENOSYS, and a target memtrim acts on has none) or a logged one (LOG). */
static int passes(uint32_t action, int lenient)
{
    uint32_t a = action & SECCOMP_RET_ACTION_FULL;
    return a == SECCOMP_RET_ALLOW ||
           (lenient && (a == SECCOMP_RET_ERRNO || a == SECCOMP_RET_TRACE || a == SECCOMP_RET_LOG));
}

/* An ALU operation; -1 where the kernel's checker refuses it. *tainted in and out. */
static int alu(uint16_t op, uint32_t a, uint32_t v, int v_tainted, uint32_t *out, int *tainted,
               int *div_zero)
{
    *div_zero = 0;
    switch (op) {
    case BPF_ADD: *out = a + v; break;
    case BPF_SUB: *out = a - v; break;
    case BPF_MUL: *out = a * v; break;
    case BPF_OR: *out = a | v; break;
    case BPF_AND: *out = a & v; break;
    case BPF_XOR: *out = a ^ v; break;
    case BPF_LSH:
    case BPF_RSH:
        if (v >= 32) { /* the checker refuses a constant; a register's: no known result */
            *tainted = 1;
            *out = 0;
        } else {
            *out = op == BPF_LSH ? a << v : a >> v;
        }
        break;
    case BPF_DIV: /* (BPF_MOD: seccomp refuses it, as any op not listed here) */
        if (v_tainted || v == 0) { /* x may be 0: the filter then returns 0, KILL_THREAD */
            *div_zero = 1;
            *out = 0;
        } else {
            *out = a / v;
        }
        break;
    case BPF_NEG: *out = (uint32_t)-a; v_tainted = 0; break;
    default:
        return -1;
    }
    *tainted = *tainted || v_tainted;
    return 0;
}

static int jump_taken(uint16_t op, uint32_t a, uint32_t v)
{
    switch (op) {
    case BPF_JEQ: return a == v;
    case BPF_JGT: return a > v;
    case BPF_JGE: return a >= v;
    default: return (a & v) != 0; /* BPF_JSET */
    }
}

/* One path from r->pc; a forked path goes on the pending list. BPF_ALLOW when it allows. */
static int run_path(const struct sock_filter *prog, unsigned len, const struct bpf_call *c,
                    struct regs *r, struct regs *pending, unsigned *npending, unsigned *steps,
                    uint32_t *action)
{
    for (;;) {
        if (r->pc >= len || ++*steps > STEP_BUDGET)
            return BPF_INVALID;
        const struct sock_filter *in = &prog[r->pc];
        uint16_t code = in->code;
        uint32_t k = in->k;
        r->pc++;
        switch (BPF_CLASS(code)) {
        case BPF_LD:
        case BPF_LDX: { /* seccomp's: LD W ABS, LD/LDX W LEN, IMM, MEM (no IND, no MSH) */
            uint32_t v, mode = BPF_MODE(code);
            int t = 0, ld = BPF_CLASS(code) == BPF_LD;
            if (BPF_SIZE(code) != BPF_W)
                return BPF_INVALID;
            if (mode == BPF_ABS && ld) {
                if (k & 3 || k >= sizeof c->word)
                    return BPF_INVALID;
                v = c->word[k / 4];
                t = (c->unknown >> (k / 4)) & 1 && !mt_control("cmd-bpf-taint");
            } else if (mode == BPF_IMM) {
                v = k;
            } else if (mode == BPF_LEN) {
                v = sizeof c->word;
            } else if (mode == BPF_MEM && k < BPF_MEMWORDS) {
                v = r->m[k];
                t = (r->taint & T_M(k)) != 0;
            } else {
                return BPF_INVALID;
            }
            uint32_t bit = ld ? T_A : T_X;
            *(ld ? &r->a : &r->x) = v;
            r->taint = t ? r->taint | bit : r->taint & ~bit;
            break;
        }
        case BPF_ST:
        case BPF_STX:
            if (k >= BPF_MEMWORDS || code & ~0x7)
                return BPF_INVALID;
            r->m[k] = BPF_CLASS(code) == BPF_ST ? r->a : r->x;
            if (r->taint & (BPF_CLASS(code) == BPF_ST ? T_A : T_X))
                r->taint |= T_M(k);
            else
                r->taint &= ~T_M(k);
            break;
        case BPF_ALU: {
            int x = BPF_SRC(code) == BPF_X, t = (r->taint & T_A) != 0, dz;
            uint32_t out;
            if (alu(BPF_OP(code), r->a, x ? r->x : k, x && (r->taint & T_X), &out, &t, &dz) != 0)
                return BPF_INVALID;
            if (dz) {
                *action = SECCOMP_RET_KILL_THREAD;
                return BPF_DENY;
            }
            r->a = out;
            r->taint = t ? r->taint | T_A : r->taint & ~T_A;
            break;
        }
        case BPF_JMP: {
            if (BPF_OP(code) == BPF_JA) {
                if (k >= len - r->pc)
                    return BPF_INVALID;
                r->pc += k;
                break;
            }
            if (BPF_OP(code) != BPF_JEQ && BPF_OP(code) != BPF_JGT && BPF_OP(code) != BPF_JGE &&
                BPF_OP(code) != BPF_JSET)
                return BPF_INVALID;
            int x = BPF_SRC(code) == BPF_X;
            unsigned to_t = r->pc + in->jt, to_f = r->pc + in->jf;
            if (to_t >= len || to_f >= len)
                return BPF_INVALID;
            if ((r->taint & T_A) || (x && (r->taint & T_X))) { /* either way: both */
                if (*npending >= PENDING_MAX)
                    return BPF_INVALID;
                pending[*npending] = *r;
                pending[(*npending)++].pc = to_f;
                r->pc = to_t;
            } else {
                r->pc = jump_taken(BPF_OP(code), r->a, x ? r->x : k) ? to_t : to_f;
            }
            break;
        }
        case BPF_RET:
            if (BPF_RVAL(code) == BPF_A && (r->taint & T_A))
                return BPF_UNKNOWN;
            if (BPF_RVAL(code) != BPF_A && BPF_RVAL(code) != BPF_K)
                return BPF_INVALID;
            *action = BPF_RVAL(code) == BPF_A ? r->a : k;
            return passes(*action, c->lenient) ? BPF_ALLOW : BPF_DENY;
        case BPF_MISC:
            if (BPF_MISCOP(code) == BPF_TAX) {
                r->x = r->a;
                r->taint = r->taint & T_A ? r->taint | T_X : r->taint & ~T_X;
            } else if (BPF_MISCOP(code) == BPF_TXA) {
                r->a = r->x;
                r->taint = r->taint & T_X ? r->taint | T_A : r->taint & ~T_A;
            } else {
                return BPF_INVALID;
            }
            break;
        default:
            return BPF_INVALID;
        }
    }
}

int bpf_eval(const struct sock_filter *prog, unsigned len, const struct bpf_call *c,
             uint32_t *action)
{
    static struct regs pending[PENDING_MAX];
    unsigned npending = 0, steps = 0;
    *action = SECCOMP_RET_ALLOW;
    if (!prog || len == 0 || len > BPF_MAXINSNS)
        return BPF_INVALID;
    struct regs r;
    memset(&r, 0, sizeof r);
    for (;;) {
        int v = run_path(prog, len, c, &r, pending, &npending, &steps, action);
        if (v != BPF_ALLOW)
            return v;
        if (npending == 0)
            return BPF_ALLOW;
        r = pending[--npending];
    }
}

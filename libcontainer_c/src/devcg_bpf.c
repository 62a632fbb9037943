/* Device cgroup v2: an eBPF program of type BPF_PROG_TYPE_CGROUP_DEVICE built from rules, attached
 * to a cgroup IN PLACE OF the program already there (attached programs are ANDed, so adding one can
 * only deny more). With keep_existing, what our rules do not decide is decided by the program we
 * replace: its instructions (read back from the kernel) follow ours, so the runtime's rules stay
 * exactly as the runtime wrote them, without this code having to know them. A tail call would need
 * the program array kept alive by a pin (the kernel empties it when its last fd closes). */
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "internal.h"
#include "libcontainer.h"

#define MAX_PROGS 64
#define MAX_OLD_INSNS 65536

/* registers: r6 ctx, r3 device type, r4 access, r5 major, r7 minor, r8 scratch */
enum { R0, R1, R2, R3, R4, R5, R6, R7, R8 };

struct prog {
    struct bpf_insn *insn;
    int n, cap;
};

static int sys_bpf(int cmd, union bpf_attr *attr)
{
    return (int)syscall(SYS_bpf, cmd, attr, sizeof(*attr));
}

static int emit(struct prog *p, __u8 code, __u8 dst, __u8 src, __s16 off, __s32 imm)
{
    if (p->n >= p->cap) {
        errno = E2BIG;
        return -1;
    }
    p->insn[p->n].code = code;
    p->insn[p->n].dst_reg = dst;
    p->insn[p->n].src_reg = src;
    p->insn[p->n].off = off;
    p->insn[p->n].imm = imm;
    return p->n++;
}

static int emit_prologue(struct prog *p)
{
    emit(p, BPF_ALU64 | BPF_MOV | BPF_X, R6, R1, 0, 0);
    emit(p, BPF_LDX | BPF_MEM | BPF_W, R2, R6, offsetof(struct bpf_cgroup_dev_ctx, access_type), 0);
    emit(p, BPF_ALU | BPF_MOV | BPF_X, R3, R2, 0, 0);
    emit(p, BPF_ALU | BPF_AND | BPF_K, R3, 0, 0, 0xffff);
    emit(p, BPF_ALU | BPF_MOV | BPF_X, R4, R2, 0, 0);
    emit(p, BPF_ALU | BPF_RSH | BPF_K, R4, 0, 0, 16);
    emit(p, BPF_LDX | BPF_MEM | BPF_W, R5, R6, offsetof(struct bpf_cgroup_dev_ctx, major), 0);
    return emit(p, BPF_LDX | BPF_MEM | BPF_W, R7, R6, offsetof(struct bpf_cgroup_dev_ctx, minor), 0);
}

/* One rule: every test jumps past the block when it does not match; a match returns the verdict.
 * An allow rule needs every requested access bit; a deny rule matches on any shared bit. Returns 1
 * for a rule without tests (it decides everything: the verifier refuses code after it). */
static int emit_rule(struct prog *p, const struct gct_device_rule *r)
{
    int jumps[4], nj = 0, i, all = GCT_DEV_MKNOD | GCT_DEV_READ | GCT_DEV_WRITE;

    if (r->type != 'a')
        jumps[nj++] = emit(p, BPF_JMP32 | BPF_JNE | BPF_K, R3, 0, 0,
                           r->type == 'c' ? BPF_DEVCG_DEV_CHAR : BPF_DEVCG_DEV_BLOCK);
    if ((int)(r->access & all) != all) {
        emit(p, BPF_ALU | BPF_MOV | BPF_X, R8, R4, 0, 0);
        emit(p, BPF_ALU | BPF_AND | BPF_K, R8, 0, 0, (__s32)r->access);
        jumps[nj++] = r->allow ? emit(p, BPF_JMP32 | BPF_JNE | BPF_X, R8, R4, 0, 0)
                               : emit(p, BPF_JMP32 | BPF_JEQ | BPF_K, R8, 0, 0, 0);
    }
    if (r->major >= 0)
        jumps[nj++] = emit(p, BPF_JMP32 | BPF_JNE | BPF_K, R5, 0, 0, (__s32)r->major);
    if (r->minor >= 0)
        jumps[nj++] = emit(p, BPF_JMP32 | BPF_JNE | BPF_K, R7, 0, 0, (__s32)r->minor);
    emit(p, BPF_ALU64 | BPF_MOV | BPF_K, R0, 0, 0, r->allow ? 1 : 0);
    if (emit(p, BPF_JMP | BPF_EXIT, 0, 0, 0, 0) < 0)
        return -1;
    for (i = 0; i < nj; i++) {
        if (jumps[i] < 0)
            return -1;
        p->insn[jumps[i]].off = (__s16)(p->n - jumps[i] - 1);
    }
    return nj == 0;
}

/* Whatever no rule decided: the replaced program's verdict (its code runs next, with r1 = ctx as
 * at its own entry), or deny. */
static int emit_epilogue(struct prog *p, const struct bpf_insn *old, __u32 old_count)
{
    if (old != NULL) {
        if (p->n + (int)old_count + 1 > p->cap) {
            errno = E2BIG;
            return -1;
        }
        emit(p, BPF_ALU64 | BPF_MOV | BPF_X, R1, R6, 0, 0);
        memcpy(&p->insn[p->n], old, old_count * sizeof(*old));
        p->n += (int)old_count;
        return 0;
    }
    emit(p, BPF_ALU64 | BPF_MOV | BPF_K, R0, 0, 0, 0);
    return emit(p, BPF_JMP | BPF_EXIT, 0, 0, 0, 0);
}

static int load_program(const struct gct_device_rule *rules, unsigned long n,
                        const struct bpf_insn *old, __u32 old_count)
{
    union bpf_attr attr;
    struct prog p;
    unsigned long i;
    int fd = -1, decided = 0;

    p.n = 0;
    p.cap = (int)(16 + 10 * n + old_count);
    p.insn = calloc((size_t)p.cap, sizeof(*p.insn));
    if (p.insn == NULL)
        return -1;
    if (emit_prologue(&p) < 0)
        goto out;
    for (i = n; i-- > 0 && !decided;) {   /* the last matching rule wins, as in the OCI list */
        decided = emit_rule(&p, &rules[i]);
        if (decided < 0)
            goto out;
    }
    if (!decided && emit_epilogue(&p, old, old_count) < 0)
        goto out;
    memset(&attr, 0, sizeof(attr));
    attr.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
    attr.insns = (__u64)(unsigned long)p.insn;
    attr.insn_cnt = (__u32)p.n;
    attr.license = (__u64)(unsigned long)"Apache-2.0";
    fd = sys_bpf(BPF_PROG_LOAD, &attr);
out:
    free(p.insn);
    return fd;
}

/* The replaced program's instructions as the kernel holds them. Only self-contained programs can be
 * carried over (the runtimes' device filters are): no helper calls, no map references. */
static int read_program(int prog_fd, struct bpf_insn **insns, __u32 *count)
{
    struct bpf_prog_info info;
    union bpf_attr attr;
    __u32 i, len;

    memset(&info, 0, sizeof(info));
    memset(&attr, 0, sizeof(attr));
    attr.info.bpf_fd = (__u32)prog_fd;
    attr.info.info_len = sizeof(info);
    attr.info.info = (__u64)(unsigned long)&info;
    if (sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &attr) < 0)
        return -1;
    len = info.xlated_prog_len;
    if (len == 0 || len % sizeof(struct bpf_insn) || len / sizeof(struct bpf_insn) > MAX_OLD_INSNS) {
        errno = len == 0 ? EPERM : E2BIG;   /* 0: the kernel hides it (kptr_restrict) */
        return -1;
    }
    *insns = calloc(1, len);
    if (*insns == NULL)
        return -1;
    memset(&info, 0, sizeof(info));
    info.xlated_prog_len = len;
    info.xlated_prog_insns = (__u64)(unsigned long)*insns;
    attr.info.info_len = sizeof(info);
    if (sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &attr) < 0)
        goto fail;
    *count = len / sizeof(struct bpf_insn);
    for (i = 0; i < *count; i++) {
        struct bpf_insn *in = &(*insns)[i];
        if ((BPF_CLASS(in->code) == BPF_JMP && BPF_OP(in->code) == BPF_CALL)
            || (in->code == (BPF_LD | BPF_DW | BPF_IMM) && in->src_reg != 0)) {
            errno = EOPNOTSUPP;
            goto fail;
        }
    }
    return 0;
fail:
    free(*insns);
    *insns = NULL;
    return -1;
}

/* Device programs attached to the cgroup: ids into ids[MAX_PROGS], their attach flags into *flags. */
static int query(int cgfd, __u32 *ids, __u32 *flags)
{
    union bpf_attr attr;

    memset(&attr, 0, sizeof(attr));
    attr.query.target_fd = (__u32)cgfd;
    attr.query.attach_type = BPF_CGROUP_DEVICE;
    attr.query.prog_ids = (__u64)(unsigned long)ids;
    attr.query.prog_cnt = MAX_PROGS;
    if (sys_bpf(BPF_PROG_QUERY, &attr) < 0)
        return -1;
    *flags = attr.query.attach_flags;
    return (int)attr.query.prog_cnt;
}

static int prog_fd_by_id(__u32 id)
{
    union bpf_attr attr;

    memset(&attr, 0, sizeof(attr));
    attr.prog_id = id;
    return sys_bpf(BPF_PROG_GET_FD_BY_ID, &attr);
}

/* Attach prog_fd in place of old_fd (or as the only program when old_fd < 0), atomically. */
static int attach(int cgfd, int prog_fd, int old_fd, __u32 old_flags)
{
    union bpf_attr attr;

    memset(&attr, 0, sizeof(attr));
    attr.target_fd = (__u32)cgfd;
    attr.attach_bpf_fd = (__u32)prog_fd;
    attr.attach_type = BPF_CGROUP_DEVICE;
    if (old_fd < 0) {
        attr.attach_flags = BPF_F_ALLOW_MULTI;
    } else if (old_flags & BPF_F_ALLOW_MULTI) {
        attr.attach_flags = BPF_F_ALLOW_MULTI | BPF_F_REPLACE;
        attr.replace_bpf_fd = (__u32)old_fd;
    } else {
        attr.attach_flags = old_flags;   /* single-program mode: attaching replaces */
    }
    return sys_bpf(BPF_PROG_ATTACH, &attr);
}

static int open_cgroup2(const char *hierarchy, const char *cgroup)
{
    struct statfs sfs;
    int root, fd;

    while (*cgroup == '/')
        cgroup++;
    root = open(hierarchy, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0)
        return -1;
    if (fstatfs(root, &sfs) < 0 || sfs.f_type != CGROUP2_SUPER_MAGIC) {
        close(root);
        errno = EXDEV;   /* not a cgroup2 mount */
        return -1;
    }
    fd = gct_openat2(root, cgroup, O_RDONLY | O_DIRECTORY,
                     RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV);
    gct_close_keep_errno(root);
    return fd;
}

int gct_devcg_v2_install(const char *hierarchy, const char *cgroup, const struct gct_device_rule *rules,
                         unsigned long nrules, int keep_existing)
{
    __u32 ids[MAX_PROGS], flags = 0, old_count = 0;
    struct bpf_insn *old_insns = NULL;
    int cgfd, count, old = -1, prog = -1, rc = -1;

    cgfd = open_cgroup2(hierarchy, cgroup);
    if (cgfd < 0)
        return -1;
    count = query(cgfd, ids, &flags);
    if (count < 0)
        goto out;
    if (count > 1) {   /* several ANDed programs: one replacement cannot stand for all of them */
        errno = EBUSY;
        goto out;
    }
    if (count == 1 && (old = prog_fd_by_id(ids[0])) < 0)
        goto out;
    if (keep_existing && old >= 0 && read_program(old, &old_insns, &old_count) < 0)
        goto out;
    prog = load_program(rules, nrules, old_insns, old_count);
    if (prog < 0)
        goto out;
    rc = attach(cgfd, prog, old, flags);
out:
    free(old_insns);
    gct_close_keep_errno(prog);
    gct_close_keep_errno(old);
    gct_close_keep_errno(cgfd);
    return rc;
}

int gct_devcg_v2_count(const char *hierarchy, const char *cgroup)
{
    __u32 ids[MAX_PROGS], flags;
    int cgfd, count;

    cgfd = open_cgroup2(hierarchy, cgroup);
    if (cgfd < 0)
        return -1;
    count = query(cgfd, ids, &flags);
    gct_close_keep_errno(cgfd);
    return count;
}

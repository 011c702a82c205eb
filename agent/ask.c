/*
 * ask.c - a process where memtrim is loaded is asked through its own API, never trimmed from
 * outside (docs/agent.md, "Under pressure"): `memtrim agent --ask PID --start-time T
 * [--timeout S]`, which the agent runs as a child exactly as it runs the command (act.c), so
 * that a hang or a fault stays there, and which prints one JSON answer in the command's shape
 * (`released_bytes`, or `error` with a code and a message).
 *
 * The API is found from the process itself: its listening sockets (the socket inodes of its
 * /proc/PID/fd, looked up in its own network namespace's /proc/PID/net/{unix,tcp,tcp6}), each
 * asked GET /healthz until one answers as memtrim with the process's own pid (its last NSpid:
 * another process's API, a worker group leader's, is not it). A TCP one is reached inside the
 * process's network namespace (setns: this child alone enters it, with the agent's
 * CAP_SYS_ADMIN), a unix one by its path under /proc/PID/root. Its token, when its API has one,
 * is its MEMTRIM_CONFIG's (the inline AuthToken, or the AuthToken or AuthTokenFile of the file
 * it names, read through /proc/PID/root). Plain HTTP only: an HTTPS API answers no plain
 * request and is reported unreachable. Nothing reaches the process but two HTTP requests.
 *
 * Thread: the child's only one. No state; every descriptor is its own.
 */
#include "agent_int.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/openat2.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "common.h"
#include "control.h"
#include "target.h"

#define ASK_INODES 256
#define ASK_CANDIDATES 16
#define ASK_REPLY (64 * 1024)

struct cand {
    struct sockaddr_storage addr;
    socklen_t len;
    int needs_netns; /* TCP and abstract unix sockets live in its network namespace */
    pid_t pid;
    char upath[AGENT_PATH]; /* a unix socket's path as the process sees it ("" none) */
    char label[160];
};

/* The socket inodes among pid's descriptors; their count. */
static int socket_inodes(pid_t pid, unsigned long *ino, int max)
{
    char dir[64], path[64 + 256], link[64];
    snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(dir);
    if (!d)
        return -errno;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        ssize_t k = readlink(path, link, sizeof link - 1);
        if (k <= 0)
            continue;
        link[k] = 0;
        if (sscanf(link, "socket:[%lu]", &ino[n]) == 1)
            n++;
    }
    closedir(d);
    return n;
}

static int owned(unsigned long ino, const unsigned long *inos, int n)
{
    for (int i = 0; i < n; i++)
        if (inos[i] == ino)
            return 1;
    return 0;
}

/* Its listening unix stream sockets: a path one reached under /proc/PID/root, an abstract
 * one ("@name") in its network namespace. */
static int unix_candidates(pid_t pid, const unsigned long *inos, int ninos, struct cand *c, int n,
                           int max)
{
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%d/net/unix", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return n;
    while (n < max && fgets(line, sizeof line, f)) {
        unsigned flags, type, st;
        unsigned long ino;
        int off = 0;
        if (sscanf(line, "%*s %*s %*s %x %x %x %lu %n", &flags, &type, &st, &ino, &off) != 4 ||
            !(flags & 0x10000) || type != SOCK_STREAM || !owned(ino, inos, ninos) || !off)
            continue;
        char *name = line + off;
        name[strcspn(name, "\n")] = 0;
        struct sockaddr_un *un = (struct sockaddr_un *)&c[n].addr;
        memset(&c[n], 0, sizeof c[n]);
        un->sun_family = AF_UNIX;
        if (name[0] == '@') {
            size_t k = strlen(name); /* "@name": a NUL then the name */
            if (k > sizeof un->sun_path)
                continue;
            memcpy(un->sun_path + 1, name + 1, k - 1);
            c[n].len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + k);
            c[n].needs_netns = 1;
        } else if (name[0] == '/' && strncmp(name, "/proc/", 6) && strlen(name) < sizeof c[n].upath) {
            c[n].pid = pid; /* its address is made at connect (unix_connect_addr) */
            snprintf(c[n].upath, sizeof c[n].upath, "%s", name);
        } else {
            continue;
        }
        snprintf(c[n].label, sizeof c[n].label, "unix:%.150s", name);
        n++;
    }
    fclose(f);
    return n;
}

/* Its listening TCP sockets (a wildcard address reached on loopback). */
static int tcp_candidates(pid_t pid, int v6, const unsigned long *inos, int ninos, struct cand *c,
                          int n, int max)
{
    char path[64], line[512], hex[40];
    snprintf(path, sizeof path, "/proc/%d/net/tcp%s", (int)pid, v6 ? "6" : "");
    FILE *f = fopen(path, "re");
    if (!f)
        return n;
    while (n < max && fgets(line, sizeof line, f)) {
        unsigned port, st;
        unsigned long ino;
        if (sscanf(line, " %*d: %32[0-9A-Fa-f]:%x %*s %x %*s %*s %*s %*s %*s %lu", hex, &port, &st,
                   &ino) != 4 || st != 0x0A || !owned(ino, inos, ninos))
            continue;
        memset(&c[n], 0, sizeof c[n]);
        char shown[INET6_ADDRSTRLEN] = "";
        if (!v6 && strlen(hex) == 8) {
            struct sockaddr_in *in = (struct sockaddr_in *)&c[n].addr;
            in->sin_family = AF_INET;
            in->sin_port = htons((uint16_t)port);
            in->sin_addr.s_addr = (uint32_t)strtoul(hex, NULL, 16); /* as the kernel printed it */
            if (in->sin_addr.s_addr == htonl(INADDR_ANY))
                in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            inet_ntop(AF_INET, &in->sin_addr, shown, sizeof shown);
            c[n].len = sizeof *in;
        } else if (v6 && strlen(hex) == 32) {
            struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&c[n].addr;
            in6->sin6_family = AF_INET6;
            in6->sin6_port = htons((uint16_t)port);
            for (int i = 0; i < 4; i++) {
                char word[9];
                memcpy(word, hex + 8 * i, 8);
                word[8] = 0;
                uint32_t w = (uint32_t)strtoul(word, NULL, 16);
                memcpy(&in6->sin6_addr.s6_addr[4 * i], &w, 4);
            }
            if (IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr))
                in6->sin6_addr = in6addr_loopback;
            inet_ntop(AF_INET6, &in6->sin6_addr, shown, sizeof shown);
            c[n].len = sizeof *in6;
        } else {
            continue;
        }
        snprintf(c[n].label, sizeof c[n].label, v6 ? "[%s]:%u" : "%s:%u", shown, port);
        c[n].needs_netns = 1;
        n++;
    }
    fclose(f);
    return n;
}

/* Waits for fd's events until deadline (monotonic ns): 1 ready, 0 timed out, -errno. */
static int wait_fd(int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = (deadline - mt_mono_ns()) / MT_MS;
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, (int)(left > 60000 ? 60000 : left));
        if (r < 0 && errno == EINTR)
            continue;
        return r < 0 ? -errno : r > 0;
    }
}

/*
 * A path of the process's, opened as the process would resolve it and never beyond: under
 * its root (/proc/PID/root) with RESOLVE_IN_ROOT, so that its absolute symbolic links and
 * ".." stay inside it (a plain open through /proc/PID/root follows an absolute link from the
 * agent's own root: a container's MEMTRIM_CONFIG pointing at a link to a host file would have
 * the agent read that file, and send its first word as a token); a relative one under its
 * cwd with RESOLVE_BENEATH. No magic link. The descriptor, or -errno (-ENOSYS before 5.6).
 */
static int their_open(pid_t pid, const char *name, int flags)
{
    char base[64];
    snprintf(base, sizeof base, "/proc/%d/%s", (int)pid, name[0] == '/' ? "root" : "cwd");
    int dir = open(base, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        return -errno;
    struct open_how how = {.flags = (uint64_t)(flags | O_CLOEXEC | (flags & O_PATH ? 0 : O_NOCTTY)),
                           .resolve = RESOLVE_NO_MAGICLINKS |
                                      (name[0] == '/' ? RESOLVE_IN_ROOT : RESOLVE_BENEATH)};
    const char *rel = name[0] == '/' ? name + 1 : name;
    long fd = syscall(SYS_openat2, dir, rel[0] ? rel : ".", &how, sizeof how);
    int e = errno;
    close(dir);
    return fd < 0 ? -e : (int)fd;
}

/*
 * A unix socket's address under the process's root: its directory opened (O_PATH, *dirfd)
 * through /proc/PID/root and the socket named through that descriptor, so that a path longer
 * than sun_path's 108 bytes with the prefix still connects. 0, or -errno.
 */
static int unix_connect_addr(const struct cand *c, struct sockaddr_un *un, socklen_t *len,
                             int *dirfd)
{
    char dir[AGENT_PATH + 2];
    const char *base = strrchr(c->upath, '/') + 1;
    snprintf(dir, sizeof dir, "%.*s/", (int)(base - c->upath - 1), c->upath);
    *dirfd = their_open(c->pid, dir, O_PATH | O_DIRECTORY);
    if (*dirfd < 0)
        return *dirfd;
    memset(un, 0, sizeof *un);
    un->sun_family = AF_UNIX;
    int k = snprintf(un->sun_path, sizeof un->sun_path, "/proc/self/fd/%d/%s", *dirfd, base);
    if (k < 0 || (size_t)k >= sizeof un->sun_path)
        return -ENAMETOOLONG;
    *len = sizeof *un;
    return 0;
}

/*
 * One HTTP/1.0 request to c (no chunked reply), its reply's status (or -errno, -ETIMEDOUT) and
 * its body in body[size] (NUL-terminated, cut at size - 1).
 */
static int http(const struct cand *c, const char *method, const char *path, const char *token,
                int64_t deadline, char *body, size_t size)
{
    int fd = socket(c->addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -errno;
    char req[1024];
    int status = -EPROTO, n = snprintf(req, sizeof req, "%s %s HTTP/1.0\r\nHost: localhost\r\n"
                                       "Content-Length: 0\r\n%s%s%s\r\n", method, path,
                                       token ? "Authorization: Bearer " : "", token ? token : "",
                                       token ? "\r\n" : "");
    char *reply = malloc(ASK_REPLY + 1);
    size_t got = 0;
    if (!reply || n <= 0 || (size_t)n >= sizeof req) {
        status = -ENOMEM;
        goto out;
    }
    struct sockaddr_un un;
    const struct sockaddr *to = (const struct sockaddr *)&c->addr;
    socklen_t tolen = c->len;
    int dirfd = -1;
    if (c->upath[0] && (status = unix_connect_addr(c, &un, &tolen, &dirfd)) != 0)
        goto out;
    if (c->upath[0])
        to = (const struct sockaddr *)&un;
    int crc = connect(fd, to, tolen) != 0 ? errno : 0;
    if (dirfd >= 0)
        close(dirfd);
    status = -EPROTO;
    if (crc && crc != EINPROGRESS) {
        status = -crc;
        goto out;
    }
    int err = 0;
    socklen_t el = sizeof err;
    int r = wait_fd(fd, POLLOUT, deadline);
    if (r <= 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err) {
        status = r < 0 ? r : r == 0 ? -ETIMEDOUT : -(err ? err : errno);
        goto out;
    }
    for (size_t sent = 0; sent < (size_t)n;) {
        ssize_t w = send(fd, req + sent, (size_t)n - sent, MSG_NOSIGNAL);
        if (w > 0) {
            sent += (size_t)w;
        } else if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            if ((r = wait_fd(fd, POLLOUT, deadline)) <= 0) {
                status = r < 0 ? r : -ETIMEDOUT;
                goto out;
            }
        } else {
            status = w < 0 ? -errno : -EPIPE;
            goto out;
        }
    }
    for (;;) { /* HTTP/1.0: the reply ends with the connection */
        ssize_t k = recv(fd, reply + got, ASK_REPLY - got, 0);
        if (k > 0) {
            got += (size_t)k;
            if (got == ASK_REPLY)
                break;
        } else if (k == 0) {
            break;
        } else if (errno == EAGAIN || errno == EINTR) {
            if ((r = wait_fd(fd, POLLIN, deadline)) <= 0) {
                status = r < 0 ? r : -ETIMEDOUT;
                goto out;
            }
        } else {
            status = -errno;
            goto out;
        }
    }
    reply[got] = 0;
    int code;
    const char *b = strstr(reply, "\r\n\r\n");
    if (sscanf(reply, "HTTP/1.%*d %d", &code) != 1 || !b)
        goto out; /* not HTTP (an HTTPS API, another protocol) */
    status = code;
    snprintf(body, size, "%s", b + 4);
out:
    free(reply);
    close(fd);
    return status;
}

/* A document the process wrote (its configuration, its API's answers), parsed once
 * mt_json_prescan passed it (size and depth bounded); NULL otherwise. */
static cJSON *parse(const char *text)
{
    char why[128];
    size_t len = strlen(text);
    if (mt_json_prescan(text, len, MT_JSON_DOC_MAX, MT_JSON_DEPTH_MAX, why, sizeof why) != 0)
        return NULL;
    return cJSON_ParseWithLength(text, len);
}

/* The last field of NSpid in pid's status: its pid as it sees itself (0 unknown). */
static long own_pid(pid_t pid)
{
    char text[4096];
    if (agent_proc_read(pid, "status", text, sizeof text) != 0)
        return 0;
    const char *p = strstr(text, "\nNSpid:");
    if (!p)
        return pid;
    p += 7;
    long last = 0;
    for (;;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p)
            return last;
        last = v;
        p = end;
    }
}

/* A regular file of the process's (its path as it sees it, their_open): malloc'd,
 * NUL-terminated, NULL when unreadable or over 1 MiB. */
static char *their_file(pid_t pid, const char *name)
{
    int fd = their_open(pid, name, O_RDONLY | O_NONBLOCK);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) { /* no FIFO, no device */
        close(fd);
        fd = -1;
    }
    FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
    if (!f) {
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    char *buf = malloc((1 << 20) + 1);
    size_t n = buf ? fread(buf, 1, 1 << 20, f) : 0;
    int big = buf && n == (1 << 20) && fgetc(f) != EOF;
    fclose(f);
    if (!buf || big) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    return buf;
}

/* Its MEMTRIM_CONFIG (inline, or the file it names) parsed: the root (free with cJSON_Delete;
 * NULL without one) and *sec, its "MemoryTrim" section or the root. */
static cJSON *their_config(pid_t pid, const cJSON **sec)
{
    char path[64];
    *sec = NULL;
    snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return NULL;
    char *env = malloc(1 << 20);
    size_t n = env ? fread(env, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (!env)
        return NULL;
    env[n] = 0;
    const char *value = NULL;
    for (size_t i = 0; i < n; i += strlen(env + i) + 1)
        if (!strncmp(env + i, "MEMTRIM_CONFIG=", 15))
            value = env + i + 15;
    char *owned_text = value && value[0] != '{' && value[0] ? their_file(pid, value) : NULL;
    const char *json = owned_text ? owned_text : value;
    cJSON *root = json && json[0] == '{' ? parse(json) : NULL;
    *sec = cJSON_GetObjectItemCaseSensitive(root, "MemoryTrim");
    if (!cJSON_IsObject(*sec))
        *sec = root;
    if (owned_text)
        explicit_bzero(owned_text, strlen(owned_text));
    free(owned_text);
    explicit_bzero(env, n);
    free(env);
    return root;
}

/* Its API's admin token from its configuration, into tok ("" none). */
static void their_token(pid_t pid, const cJSON *sec, char *tok, size_t size)
{
    tok[0] = 0;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(sec, "AuthToken");
    const cJSON *tf = cJSON_GetObjectItemCaseSensitive(sec, "AuthTokenFile");
    if (cJSON_IsString(t)) {
        snprintf(tok, size, "%s", t->valuestring);
    } else if (cJSON_IsString(tf)) {
        char *text = their_file(pid, tf->valuestring);
        if (text) {
            size_t k = strcspn(text, "\r\n \t");
            snprintf(tok, size, "%.*s", (int)(k < size ? k : size - 1), text);
            explicit_bzero(text, strlen(text));
        }
        free(text);
    }
    if (mt_token_bad_byte(tok, strlen(tok)) >= 0)
        tok[0] = 0;
}

/* Its configuration's unix socket (HttpBind "unix:/path"), first among the candidates (the
 * kernel shows a listening socket's path as its server bound it, through a descriptor of its
 * directory, which names nothing here); its /healthz's pid says whether it is its own. */
static int config_candidate(pid_t pid, const cJSON *sec, struct cand *c, int n, int max)
{
    const cJSON *bind = cJSON_GetObjectItemCaseSensitive(sec, "HttpBind");
    if (!cJSON_IsString(bind) || strncmp(bind->valuestring, "unix:/", 6) || n >= max ||
        strlen(bind->valuestring + 5) >= sizeof c->upath)
        return n;
    memmove(&c[1], &c[0], (size_t)n * sizeof *c);
    memset(&c[0], 0, sizeof c[0]);
    c[0].addr.ss_family = AF_UNIX;
    c[0].pid = pid;
    snprintf(c[0].upath, sizeof c[0].upath, "%s", bind->valuestring + 5);
    snprintf(c[0].label, sizeof c[0].label, "unix:%.150s", c[0].upath);
    return n + 1;
}

/* Enters pid's network namespace when it is not ours: 0, or -errno. */
static int enter_netns(pid_t pid)
{
    char path[64];
    struct stat theirs, ours;
    snprintf(path, sizeof path, "/proc/%d/ns/net", (int)pid);
    if (stat(path, &theirs) != 0 || stat("/proc/self/ns/net", &ours) != 0)
        return -errno;
    if (theirs.st_ino == ours.st_ino && theirs.st_dev == ours.st_dev)
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = setns(fd, CLONE_NEWNET) == 0 ? 0 : -errno;
    close(fd);
    return rc;
}

/* The answer, one line of JSON on stdout (the agent's pipe); o is freed. */
static void answer(cJSON *o)
{
    char *s = cJSON_PrintUnformatted(o);
    if (s)
        puts(s);
    free(s);
    cJSON_Delete(o);
}

static int answer_error(pid_t pid, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int answer_error(pid_t pid, const char *code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddNumberToObject(o, "pid", pid);
    cJSON_AddStringToObject(e, "code", code);
    cJSON_AddStringToObject(e, "message", msg);
    answer(o);
    return 2;
}

int agent_ask(pid_t pid, unsigned long long start, double timeout_s)
{
    int64_t deadline = mt_mono_ns() + (int64_t)(timeout_s * 1e9);
    if (!start || target_start_time(pid) != start)
        return answer_error(pid, "no_such_process", "process %d is gone (or is another one now)",
                            (int)pid);
    unsigned long inos[ASK_INODES];
    int ninos = socket_inodes(pid, inos, ASK_INODES);
    if (ninos < 0)
        return answer_error(pid, "api_unreachable", "memtrim is loaded in process %d, but its "
                            "descriptors cannot be read (%s): its API is not asked, nor is it "
                            "trimmed from outside", (int)pid, strerror(-ninos));
    struct cand c[ASK_CANDIDATES];
    int n = unix_candidates(pid, inos, ninos, c, 0, ASK_CANDIDATES);
    n = tcp_candidates(pid, 0, inos, ninos, c, n, ASK_CANDIDATES);
    n = tcp_candidates(pid, 1, inos, ninos, c, n, ASK_CANDIDATES);
    const cJSON *sec;
    cJSON *config = their_config(pid, &sec);
    n = config_candidate(pid, sec, c, n, ASK_CANDIDATES); /* its /healthz says if it is its */
    int netns = 0;
    for (int i = 0; i < n; i++)
        netns |= c[i].needs_netns;
    int ns_rc = netns ? enter_netns(pid) : 0;
    long self = own_pid(pid);
    char *body = malloc(ASK_REPLY);
    if (!body) {
        cJSON_Delete(config);
        return answer_error(pid, "failed", "out of memory");
    }
    char tried[512] = "";
    size_t tl = 0;
    const struct cand *api = NULL;
    for (int i = 0; i < n && !api; i++) {
        if (c[i].needs_netns && ns_rc != 0)
            continue;
        int st = http(&c[i], "GET", "/healthz", NULL, deadline, body, ASK_REPLY);
        cJSON *h = st == 200 ? parse(body) : NULL;
        const cJSON *hp = cJSON_GetObjectItemCaseSensitive(h, "pid");
        const cJSON *hv = cJSON_GetObjectItemCaseSensitive(h, "version");
        if (cJSON_IsNumber(hp) && cJSON_IsString(hv) && (long)hp->valuedouble == self)
            api = &c[i];
        else if (tl < sizeof tried)
            tl += (size_t)snprintf(tried + tl, sizeof tried - tl, "%s%s (%s)", tl ? ", " : "",
                                   c[i].label, st == 200 ? (cJSON_IsNumber(hp) ? "another process's memtrim"
                                   : "not memtrim's") : st < 0 ? strerror(-st) : "no /healthz");
        cJSON_Delete(h);
    }
    if (!api) {
        free(body);
        cJSON_Delete(config);
        return answer_error(pid, "api_unreachable", "memtrim is loaded in process %d, but no "
                            "listening socket of its own answers as its API (%s%s%s): it is not "
                            "trimmed from outside", (int)pid, n ? "tried " : "it listens on none",
                            tried, netns && ns_rc ? "; its network namespace could not be entered"
                            : "");
    }
    char tok[256];
    their_token(pid, sec, tok, sizeof tok);
    cJSON_Delete(config);
    int st = http(api, "POST", "/memory/trim", tok[0] ? tok : NULL, deadline, body, ASK_REPLY);
    explicit_bzero(tok, sizeof tok);
    cJSON *r = st == 200 ? parse(body) : NULL;
    const cJSON *rel = cJSON_GetObjectItemCaseSensitive(r, "released_bytes");
    int rc = 0;
    /* its answer is the process's word: a byte count a process could hold (under 2^53, the
     * exact integers of a JSON number), or none */
    if (cJSON_IsNumber(rel) && ((rel->valuedouble >= 0 && rel->valuedouble <= 9007199254740992.0) ||
                                mt_control("agent-api-answer-unchecked"))) { /* the defect */
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "pid", pid);
        cJSON_AddNumberToObject(o, "released_bytes", rel->valuedouble);
        cJSON_AddStringToObject(o, "via", "api");
        cJSON_AddStringToObject(o, "api", api->label);
        answer(o);
    } else if (st == 401 || st == 403) {
        rc = answer_error(pid, "api_refused", "memtrim's API in process %d (%s) asks for a token "
                          "the agent could not read from its MEMTRIM_CONFIG (%d): it is not "
                          "trimmed from outside", (int)pid, api->label, st);
    } else if (st == 429) {
        rc = answer_error(pid, "api_busy", "memtrim's API in process %d (%s) trimmed a moment "
                          "ago (429): asked again later", (int)pid, api->label);
    } else {
        rc = answer_error(pid, "api_failed", "memtrim's API in process %d (%s) did not trim: %s",
                          (int)pid, api->label, st < 0 ? strerror(-st) : "an unexpected answer");
    }
    cJSON_Delete(r);
    free(body);
    return rc;
}

/*
 * kind.c - what a cgroup is, read from its path alone: a systemd unit, a Docker, Podman or
 * containerd (CRI-O) container, or a Kubernetes pod or one of its containers, with the pod's
 * UID and the container's id. Both drivers' forms:
 *   systemd: /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<UID_>.slice/
 *            cri-containerd-<ID>.scope (crio-<ID>.scope, docker-<ID>.scope), the UID with
 *            underscores for dashes; /system.slice/docker-<ID>.scope; libpod-<ID>.scope
 *   cgroupfs: /kubepods/burstable/pod<UID>/<ID>, /docker/<ID>, /libpod_parent/libpod-<ID>
 * Pure functions of their arguments; any thread.
 */
#include "agent_int.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

static const char *const kind_names[AK_KINDS] = {"other", "unit", "docker", "podman", "containerd",
                                                 "cri-o", "pod", "pod-container"};

const char *agent_kind_name(enum agent_kind k)
{
    return k >= 0 && k < AK_KINDS ? kind_names[k] : "other";
}

/* Copies s[0..n) into out (size outlen), NUL-terminated; 0, or -1 when it does not fit. */
static int take(char *out, size_t outlen, const char *s, size_t n)
{
    if (n >= outlen)
        return -1;
    memcpy(out, s, n);
    out[n] = 0;
    return 0;
}

static int all_hex(const char *s, size_t n)
{
    if (n < 12)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i]))
            return 0;
    return 1;
}

/* A pod UID: 36 characters of hex in 8-4-4-4-12 with '-' or '_' between. */
static int pod_uid(const char *s, size_t n, char *out, size_t outlen)
{
    if (n != 36 || outlen < 37)
        return 0;
    for (size_t i = 0; i < n; i++) {
        int sep = i == 8 || i == 13 || i == 18 || i == 23;
        if (sep ? (s[i] != '-' && s[i] != '_') : !isxdigit((unsigned char)s[i]))
            return 0;
        out[i] = sep ? '-' : s[i];
    }
    out[n] = 0;
    return 1;
}

static int ends_with(const char *s, size_t n, const char *suffix)
{
    size_t k = strlen(suffix);
    return n >= k && !memcmp(s + n - k, suffix, k);
}

/* A container component: <prefix><hex>[.scope]; its runtime and id. */
static const struct {
    const char *prefix, *runtime;
    enum agent_kind kind;
} containers[] = {
    {"cri-containerd-", "containerd", AK_CONTAINERD},
    {"crio-", "cri-o", AK_CRIO},
    {"docker-", "docker", AK_DOCKER},
    {"libpod-", "podman", AK_PODMAN},
    {"nerdctl-", "containerd", AK_CONTAINERD},
};

static int container(const char *s, size_t n, struct agent_kind_info *out)
{
    if (ends_with(s, n, ".scope"))
        n -= 6;
    for (size_t i = 0; i < sizeof containers / sizeof containers[0]; i++) {
        size_t k = strlen(containers[i].prefix);
        if (n > k && !memcmp(s, containers[i].prefix, k) && all_hex(s + k, n - k) &&
            take(out->container_id, sizeof out->container_id, s + k, n - k) == 0) {
            snprintf(out->runtime, sizeof out->runtime, "%s", containers[i].runtime);
            out->kind = containers[i].kind;
            return 1;
        }
    }
    return 0;
}

int agent_kind_parse(const char *path, struct agent_kind_info *out)
{
    memset(out, 0, sizeof *out);
    out->kind = AK_OTHER;
    int in_pods = 0, in_docker = 0, in_containerd_ns = 0, level = 0;
    for (const char *p = path; *p;) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char uid[37];
        if ((n == 8 && !memcmp(p, "kubepods", 8)) || (n == 14 && !memcmp(p, "kubepods.slice", 14))) {
            in_pods = 1;
        } else if (in_pods && ((n > 9 && !memcmp(p, "kubepods-", 9)) || n < 12)) {
            /* kubepods-burstable.slice, kubepods-besteffort-pod<UID>.slice, burstable/ */
            const char *q = n > 9 && !memcmp(p, "kubepods-", 9) ? p + 9 : p;
            size_t qn = n - (size_t)(q - p);
            static const char *const classes[] = {"burstable", "besteffort", "guaranteed"};
            for (size_t i = 0; i < 3; i++)
                if (qn >= strlen(classes[i]) && !memcmp(q, classes[i], strlen(classes[i])))
                    snprintf(out->qos, sizeof out->qos, "%s", classes[i]);
            const char *pod = NULL;
            for (const char *x = q; x + 3 <= q + qn; x++)
                if (!memcmp(x, "pod", 3))
                    pod = x + 3;
            if (pod && ends_with(p, n, ".slice") &&
                pod_uid(pod, (size_t)(p + n - 6 - pod), uid, sizeof uid)) {
                memcpy(out->pod_uid, uid, sizeof uid);
                out->kind = AK_POD;
                if (!out->qos[0])
                    snprintf(out->qos, sizeof out->qos, "guaranteed");
            }
        } else if (in_pods && n > 3 && !memcmp(p, "pod", 3) && pod_uid(p + 3, n - 3, uid, sizeof uid)) {
            memcpy(out->pod_uid, uid, sizeof uid); /* cgroupfs: pod<UID> */
            out->kind = AK_POD;
            if (!out->qos[0])
                snprintf(out->qos, sizeof out->qos, "guaranteed");
        } else if (in_pods && out->pod_uid[0]) {
            struct agent_kind_info c = *out;
            if (container(p, n, &c) || (all_hex(p, n) && n >= 32 &&
                                        take(c.container_id, sizeof c.container_id, p, n) == 0)) {
                memcpy(out->container_id, c.container_id, sizeof c.container_id);
                memcpy(out->runtime, c.runtime, sizeof c.runtime);
                out->kind = AK_POD_CONTAINER;
            }
        } else if (!in_pods && container(p, n, out)) {
            /* docker-<ID>.scope, libpod-<ID>.scope, ... (whatever slice it is in) */
        } else if (!in_pods && level == 0 && n == 6 && !memcmp(p, "docker", 6)) {
            in_docker = 1;
        } else if (!in_pods && in_docker && all_hex(p, n) && n >= 32) {
            take(out->container_id, sizeof out->container_id, p, n);
            snprintf(out->runtime, sizeof out->runtime, "docker");
            out->kind = AK_DOCKER;
        } else if (!in_pods && level == 0 && n == 13 && !memcmp(p, "libpod_parent", 13)) {
            /* cgroupfs podman: libpod_parent/libpod-<ID> (container() above takes it) */
        } else if (!in_pods && level == 0 && n == 7 && !memcmp(p, "default", 7)) {
            in_containerd_ns = 1; /* containerd's cgroupfs namespace "default" */
        } else if (!in_pods && in_containerd_ns && all_hex(p, n) && n >= 32) {
            take(out->container_id, sizeof out->container_id, p, n);
            snprintf(out->runtime, sizeof out->runtime, "containerd");
            out->kind = AK_CONTAINERD;
        }
        if (ends_with(p, n, ".service") || ends_with(p, n, ".scope") || ends_with(p, n, ".slice"))
            take(out->unit, sizeof out->unit, p, n);
        level++;
        p += n;
    }
    if (out->kind == AK_OTHER && out->unit[0] && !ends_with(out->unit, strlen(out->unit), ".slice"))
        out->kind = AK_UNIT;
    return 0;
}

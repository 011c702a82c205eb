/*
 * doctor.c - GET /memory/doctor: the doctor's findings (core/decide/doctor.c's
 * rules over what the instance measured), most severe first, each with its
 * evidence, severity and recommendation. JSON by default; plain text when
 * the Accept header prefers text/plain (q-values honoured). Runs on HTTP
 * workers; the core takes its own locks.
 */
#include "mt_alloc.h"
#include "api.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core.h"

/* The q of media type `type` in an Accept header (0 absent; any-type counts when wildcard). */
static double accept_q(const char *accept, const char *type, int wildcard)
{
    double best = 0;
    const char *p = accept;
    while (p && *p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len && (*p == ' ' || *p == '\t'))
            p++, len--;
        size_t tlen = 0;
        while (tlen < len && p[tlen] != ';' && p[tlen] != ' ')
            tlen++;
        int match = (tlen == strlen(type) && strncasecmp(p, type, tlen) == 0) ||
                    (wildcard && tlen == 3 && strncmp(p, "*/*", 3) == 0);
        if (match) {
            double q = 1;
            const char *qp = memchr(p, ';', len);
            for (; qp && qp < p + len; qp = memchr(qp + 1, ';', (size_t)(p + len - qp - 1))) {
                const char *v = qp + 1;
                while (*v == ' ')
                    v++;
                if (strncmp(v, "q=", 2) == 0)
                    q = strtod(v + 2, NULL) >= 0 ? strtod(v + 2, NULL) : 0;
            }
            if (q > best)
                best = q;
        }
        p = end ? end + 1 : NULL;
    }
    return best;
}

static int wants_text(const char *accept)
{
    if (!accept)
        return 0;
    double text = accept_q(accept, "text/plain", 0);
    return text > 0 && text > accept_q(accept, "application/json", 1);
}

static cJSON *finding_json(const struct doctor_finding *f, int *failed)
{
    cJSON *o = cJSON_CreateObject(), *ev = cJSON_CreateObject(), *rec = cJSON_CreateObject();
    api_json_str(o, "id", f->id, failed);
    api_json_str(o, "severity", mt_doctor_severity_name(f->severity), failed);
    api_json_str(o, "title", f->title, failed);
    api_json_str(o, "detail", f->detail, failed);
    for (int i = 0; i < f->nevidence; i++)
        api_json_num(ev, f->evidence[i].name, f->evidence[i].value, failed);
    api_json_item(o, "evidence", ev, failed);
    api_json_str(rec, "kind", f->kind, failed);
    if (f->key[0])
        api_json_str(rec, "key", f->key, failed);
    else
        api_json_null(rec, "key", failed);
    if (f->has_value)
        api_json_num(rec, "value", f->value, failed);
    else
        api_json_null(rec, "value", failed);
    api_json_str(rec, "action", f->action, failed);
    api_json_item(o, "recommendation", rec, failed);
    return o;
}

int api_doctor_get(const struct server_request *req, struct server_reply *rep)
{
    struct doctor_finding *f = mt_calloc(DOCTOR_MAX_FINDINGS, sizeof(*f));
    if (!f)
        return server_reply_error(rep, 500, "out_of_memory", "out of memory");
    int n = mt_doctor_run(req->app, f, DOCTOR_MAX_FINDINGS), rc;

    if (wants_text(req->accept)) {
        char *text = mt_doctor_text(f, n);
        rc = text ? server_reply_text(rep, 200, "text/plain; charset=utf-8", text, strlen(text))
                  : server_reply_error(rep, 500, "out_of_memory", "out of memory");
    } else {
        int failed = 0;
        cJSON *root = cJSON_CreateObject(), *list = cJSON_CreateArray();
        api_json_int(root, "timestamp_ms", mt_now_ms(), &failed);
        api_json_str(root, "allocator", mt_allocator_name(req->app), &failed);
        api_json_int(root, "finding_count", n, &failed);
        for (int i = 0; i < n; i++)
            api_json_item(list, NULL, finding_json(&f[i], &failed), &failed);
        api_json_item(root, "findings", list, &failed);
        rc = server_reply_json(rep, 200, api_json_done(root, failed));
    }
    free(f);
    return rc;
}

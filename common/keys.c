/*
 * keys.c - the rules a configuration key follows in each of memtrim's configuration parsers
 * (the plugin's core/config and the node agent's agent/config.c): what a bearer token may
 * hold (mt_token_bad_byte, mt_token_check) and the closest known key to a mistyped one
 * (mt_closest_key, for "did you mean"), and a token read from its file (mt_token_file_read:
 * AuthTokenFile, ReadTokenFile). One place, so that the two parsers cannot drift.
 * No state, no locks: any thread.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

long mt_token_bad_byte(const char *tok, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)tok[i] <= ' ' || (unsigned char)tok[i] >= 0x7f)
            return (long)i;
    return -1;
}

int mt_token_check(const char *key, const char *tok, char *err, size_t errlen)
{
    long at = mt_token_bad_byte(tok, strlen(tok));
    if (at < 0)
        return 0;
    snprintf(err, errlen,
             "configuration key %s: the token holds a space, a control character or a "
             "non-ASCII byte (byte 0x%02x at offset %ld); a token is printable ASCII, as a "
             "bearer token in an HTTP header must be",
             key, (unsigned char)tok[at], at);
    return -EINVAL;
}

/* Case-insensitive edit distance, capped strings (keys are short). */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), row[64], prev;
    if (la >= 63 || lb >= 63)
        return (size_t)-1;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        prev = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t cur = row[j];
            size_t cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
            size_t best = prev + cost;
            if (row[j] + 1 < best)
                best = row[j] + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            prev = cur;
        }
    }
    return row[lb];
}

const char *mt_closest_key(const char *key, const void *table, size_t n, size_t stride)
{
    const char *best = NULL;
    size_t best_d = (size_t)-1, len = key ? strlen(key) : 0;
    if (!key)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        const char *name = *(const char *const *)((const char *)table + i * stride);
        size_t d = edit_distance(key, name);
        if (d < best_d) {
            best_d = d;
            best = name;
        }
    }
    /* Suggest only what looks like a typo, not any key at all. */
    size_t limit = len / 3 > 2 ? len / 3 : 2;
    return best_d <= limit ? best : NULL;
}

#define TOKEN_FILE_MAX 4096

int mt_token_file_read(const char *key, const char *path, char *dest, size_t size, char *err,
                       size_t errlen)
{
    char buf[TOKEN_FILE_MAX + 1];
    struct stat st;

    if (path[0] == '\0')
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "configuration key %s: cannot open '%.400s': %s", key, path,
                 strerror(e));
        return -e;
    }
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        snprintf(err, errlen, "configuration key %s: '%.400s': %s", key, path, strerror(-rc));
    } else if (!S_ISREG(st.st_mode)) {
        rc = -EINVAL;
        snprintf(err, errlen, "configuration key %s: '%.400s' is not a regular file", key, path);
    } else if ((st.st_mode & 077) != 0) {
        rc = -EACCES;
        snprintf(err, errlen, "configuration key %s: '%.400s' has mode %04o: its group or others "
                 "may use it; make it readable by its owner only (chmod 600), as ssh asks of a "
                 "private key", key, path, (unsigned)(st.st_mode & 07777));
    } else if (!mt_secret_owner_ok(st.st_uid)) {
        rc = -EACCES;
        snprintf(err, errlen, "configuration key %s: '%.400s' belongs to another user; it must "
                 "belong to the user running the host (or root)", key, path);
    }
    ssize_t n = rc ? 0 : mt_pread_all(fd, buf, sizeof(buf));
    if (n >= TOKEN_FILE_MAX) /* as large as the limit: refused, as it always was */
        n = -EFBIG;
    close(fd);
    if (rc)
        return rc;
    if (n < 0) {
        snprintf(err, errlen, "configuration key %s: cannot read '%.400s': %s", key, path,
                 n == -EFBIG ? "larger than 4 KiB" : strerror((int)-n));
        rc = (int)n;
        goto out;
    }
    while (n > 0 &&
           (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '\t'))
        buf[--n] = '\0';
    if (n == 0 || (size_t)n >= size) {
        char why[64];
        snprintf(why, sizeof(why), n ? "longer than %zu characters" : "empty", size - 1);
        snprintf(err, errlen, "configuration key %s: the token in '%.400s' is %s", key, path, why);
        rc = -EINVAL;
        goto out;
    }
    if (mt_token_bad_byte(buf, (size_t)n) >= 0) {
        snprintf(err, errlen, "configuration key %s: the token in '%.400s' holds a space, a "
                 "control character or a non-ASCII byte", key, path);
        rc = -EINVAL;
        goto out;
    }
    memcpy(dest, buf, (size_t)n + 1);
out:
    explicit_bzero(buf, sizeof(buf));
    return rc;
}

/*
 * token.c - AuthTokenFile and ReadTokenFile: the bearer tokens (admin and read
 * scope) read from a file at start, so
 * that it never appears in a command line or an environment (both readable
 * in /proc/PID), and the rule every token follows, inline ones too
 * (config_token_check, on common/keys.c's rule). Like ssh with a private key, a file that its group or
 * others may read, or that belongs to another user, is refused.
 * Runs on the thread that starts the instance; no state, no locks.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mt_alloc.h"
#include "common.h"
#include "config.h"

#define TOKEN_FILE_MAX 4096

static int token_fail(char **err, int rc, const char *fmt, const char *path, const char *why)
{
    char buf[768];
    snprintf(buf, sizeof(buf), fmt, path, why);
    *err = mt_strdup(buf);
    return rc;
}

/* Read fd whole (at most size - 1 bytes); -EFBIG when larger. */
static ssize_t token_read_all(int fd, char *buf, size_t size)
{
    size_t total = 0;
    for (;;) {
        ssize_t n = read(fd, buf + total, size - total);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        if (n == 0)
            break;
        total += (size_t)n;
        if (total == size)
            return -EFBIG;
    }
    buf[total] = '\0';
    return (ssize_t)total;
}

int config_token_check(const char *key, const char *tok, char **err)
{
    char buf[256];
    int rc = mt_token_check(key, tok, buf, sizeof(buf));
    if (rc != 0)
        *err = mt_strdup(buf);
    return rc;
}

/* One token file (key names it in messages) into dest[size]. */
static int token_file_read(const char *key, const char *path, char *dest, size_t size, char **err)
{
    char buf[TOKEN_FILE_MAX + 1], why[64], fmt[256];
    struct stat st;

    if (path[0] == '\0')
        return 0;
#define TOKEN_FMT(text) (snprintf(fmt, sizeof(fmt), "configuration key %s: %s", key, text), fmt)
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return token_fail(err, -errno, TOKEN_FMT("cannot open '%.400s': %s"), path,
                          strerror(errno));
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        rc = token_fail(err, -errno, TOKEN_FMT("'%.400s': %s"), path, strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        rc = token_fail(err, -EINVAL, TOKEN_FMT("'%.400s' is %s"), path, "not a regular file");
    } else if ((st.st_mode & 077) != 0) {
        snprintf(why, sizeof(why), "%04o", (unsigned)(st.st_mode & 07777));
        rc = token_fail(err, -EACCES,
                        TOKEN_FMT("'%.400s' has mode %s: its group or others may use it; make it "
                                  "readable by its owner only (chmod 600), as ssh asks of a "
                                  "private key"),
                        path, why);
    } else if (!mt_secret_owner_ok(st.st_uid)) {
        rc = token_fail(err, -EACCES,
                        TOKEN_FMT("'%.400s' %s; it must belong to the user running the host (or "
                                  "root)"),
                        path, "belongs to another user");
    }
    ssize_t n = rc ? 0 : token_read_all(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (rc)
        return rc;
    if (n < 0) {
        rc = token_fail(err, (int)n, TOKEN_FMT("cannot read '%.400s': %s"), path,
                        n == -EFBIG ? "larger than 4 KiB" : strerror((int)-n));
        goto out;
    }
    while (n > 0 &&
           (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' || buf[n - 1] == '\t'))
        buf[--n] = '\0';
    if (n == 0 || (size_t)n >= size) {
        snprintf(why, sizeof(why), n ? "longer than %zu characters" : "empty", size - 1);
        rc = token_fail(err, -EINVAL, TOKEN_FMT("the token in '%.400s' is %s"), path, why);
        goto out;
    }
    if (mt_token_bad_byte(buf, (size_t)n) >= 0) {
        rc = token_fail(err, -EINVAL, TOKEN_FMT("the token in '%.400s' %s"), path,
                        "holds a space, a control character or a non-ASCII byte");
        goto out;
    }
    memcpy(dest, buf, (size_t)n + 1);
#undef TOKEN_FMT
out:
    explicit_bzero(buf, sizeof(buf));
    return rc;
}

int config_read_token_file(struct mt_config *cfg, char **err)
{
    *err = NULL;
    int rc = token_file_read("AuthTokenFile", cfg->auth_token_file, cfg->auth_token,
                             sizeof(cfg->auth_token), err);
    if (rc == 0)
        rc = token_file_read("ReadTokenFile", cfg->read_token_file, cfg->read_token,
                             sizeof(cfg->read_token), err);
    if (rc == 0 && cfg->read_token[0] && strcmp(cfg->read_token, cfg->auth_token) == 0) {
        *err = mt_strdup("configuration keys ReadToken and AuthToken: the two tokens are the same, "
                      "so the read token would also trim and change the configuration; give "
                      "them different values");
        rc = -EINVAL;
    }
    return rc;
}

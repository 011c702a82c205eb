/*
 * token.c - AuthTokenFile and ReadTokenFile: the bearer tokens (admin and read
 * scope) read from a file at start, so
 * that it never appears in a command line or an environment (both readable
 * in /proc/PID), and the rule every token follows, inline ones too
 * (config_token_check, on common/keys.c's rule). The file is read by common/keys.c's
 * mt_token_file_read (the agent's parser reads its own with it): like ssh with a private key,
 * a file that its group or others may read, or that belongs to another user, is refused.
 * Runs on the thread that starts the instance; no state, no locks.
 */
#include <errno.h>
#include <string.h>

#include "mt_alloc.h"
#include "common.h"
#include "config.h"

int config_token_check(const char *key, const char *tok, char **err)
{
    char buf[256];
    int rc = mt_token_check(key, tok, buf, sizeof(buf));
    if (rc != 0)
        *err = mt_strdup(buf);
    return rc;
}

/* One token file (key names it in messages) into dest[size]: common/keys.c's reader, its
 * message made the caller's. */
static int token_file_read(const char *key, const char *path, char *dest, size_t size, char **err)
{
    char buf[768];
    int rc = mt_token_file_read(key, path, dest, size, buf, sizeof(buf));
    if (rc != 0)
        *err = mt_strdup(buf);
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

/*
 * tls.c - HTTPS through libmicrohttpd's own GnuTLS support: the certificate,
 * key and client CA files read and checked before a daemon uses them (every
 * problem named with its file: missing, unreadable, readable by others, not
 * PEM, expired or not yet valid, a key that does not match the certificate),
 * the client certificate check of mutual TLS, and the reload thread that
 * serves renewed files without a restart.
 *
 * Reload: MHD cannot change the certificate of a running daemon. Every
 * TLS_RELOAD_CHECK_NS the thread "memtrim-tls" compares the files' identity
 * (inode, size, mtime, ctime); when one changed and the new set loads and
 * checks, it starts a second daemon on the same listening socket
 * (MHD_OPTION_LISTEN_SOCKET), then quiesces the old one (it accepts no more).
 * The old daemon serves its open connections on: each gets its next reply
 * with "Connection: close" (server.c, server_send: its access handler's
 * context carries its generation, older than s->tls_gen), and the old daemon is
 * stopped once it holds none, or after TLS_DRAIN_MAX_NS. A set that fails its
 * checks is logged once and the running certificate stays.
 *
 * Threads and locks: s->tls_lock guards s->daemon's swap (and s->draining);
 * handlers read only s->tls_gen (an atomic load) and their daemon's own
 * context (struct server_dctx, in its pems). The PEM buffers of a daemon live as
 * long as it does (struct server_pems, freed after MHD_stop_daemon).
 */
#include <errno.h>
#include <fcntl.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mt_alloc.h"
#include "common.h"
#include "internal.h"

#define TLS_FILE_MAX (1024 * 1024)

/* TLS 1.2 and 1.3 only; AEAD ciphers with forward secrecy; safe renegotiation required. */
const char server_tls_priorities[] =
    "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2:-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:"
    "+CHACHA20-POLY1305:-MAC-ALL:+AEAD:-KX-ALL:+ECDHE-RSA:+ECDHE-ECDSA:-SHA1:%SAFE_RENEGOTIATION";

/* Read a PEM file whole; key: refuse one its group or others may read. 0 or -errno + *err. */
static int tls_read_file(const char *key, const char *path, int secret, char **out, size_t *len,
                         struct server_file_id *id, char **err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        int e = errno;
        *err = server_strdupf("%s '%s': %s", key, path,
                        e == ENOENT ? "no such file" : e == EACCES ? "not readable by the host's "
                                                                     "user (permission denied)"
                                                                   : strerror(e));
        return -e;
    }
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        *err = server_strdupf("%s '%s': %s", key, path, strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        rc = -EINVAL;
        *err = server_strdupf("%s '%s': not a regular file", key, path);
    } else if (secret && (st.st_mode & 077) != 0) {
        rc = -EACCES;
        *err = server_strdupf("%s '%s' has mode %04o: its group or others may read the private key; "
                        "make it readable by its owner only (chmod 600)",
                        key, path, (unsigned)(st.st_mode & 07777));
    } else if (secret && !mt_secret_owner_ok(st.st_uid)) {
        rc = -EACCES;
        *err = server_strdupf("%s '%s' belongs to another user (uid %u); it must belong to the "
                              "user running the host (uid %u) or root, as token files must",
                              key, path, (unsigned)st.st_uid, (unsigned)geteuid());
    } else if (st.st_size <= 0 || st.st_size > TLS_FILE_MAX) {
        rc = -EINVAL;
        *err = server_strdupf("%s '%s': %s", key, path, st.st_size <= 0 ? "empty" : "larger than 1 MiB");
    }
    char *buf = rc ? NULL : mt_malloc((size_t)st.st_size + 1);
    if (rc == 0 && buf == NULL) {
        rc = -ENOMEM;
        *err = server_strdupf("%s '%s': out of memory", key, path);
    }
    size_t got = 0;
    while (rc == 0 && got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = n < 0 ? -errno : -EIO;
            *err = server_strdupf("%s '%s': cannot read: %s", key, path,
                            n < 0 ? strerror(errno) : "it shrank while read");
        } else {
            got += (size_t)n;
        }
    }
    close(fd);
    if (rc) {
        if (buf)
            explicit_bzero(buf, (size_t)st.st_size);
        free(buf);
        return rc;
    }
    buf[got] = '\0';
    if (id)
        server_file_id_of(&st, id);
    *out = buf;
    *len = got;
    return 0;
}

static void tls_date(time_t t, char *buf, size_t size)
{
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, size, "%Y-%m-%d %H:%M:%S UTC", &tm);
}

/* Import a PEM list of certificates; check the first (the server's or the CA's) for its dates. */
static int tls_check_certs(const char *key, const char *path, const char *pem, size_t len,
                           int check_dates, char **err)
{
    if (strstr(pem, "-----BEGIN CERTIFICATE-----") == NULL) {
        *err = server_strdupf("%s '%s': not a PEM certificate (no '-----BEGIN CERTIFICATE-----' line)",
                        key, path);
        return -EINVAL;
    }
    gnutls_x509_crt_t *crts = NULL;
    unsigned int n = 0;
    gnutls_datum_t d = {.data = (unsigned char *)pem, .size = (unsigned)len};
    int g = gnutls_x509_crt_list_import2(&crts, &n, &d, GNUTLS_X509_FMT_PEM, 0);
    if (g < 0 || n == 0) {
        *err = server_strdupf("%s '%s': not a valid PEM certificate: %s", key, path,
                        g < 0 ? gnutls_strerror(g) : "no certificate in it");
        return -EINVAL;
    }
    int rc = 0;
    time_t now = time(NULL);
    time_t until = gnutls_x509_crt_get_expiration_time(crts[0]);
    time_t from = gnutls_x509_crt_get_activation_time(crts[0]);
    char when[64];
    if (check_dates && until != (time_t)-1 && until < now) {
        tls_date(until, when, sizeof(when));
        *err = server_strdupf("%s '%s': the certificate expired on %s", key, path, when);
        rc = -EKEYEXPIRED;
    } else if (check_dates && from != (time_t)-1 && from > now) {
        tls_date(from, when, sizeof(when));
        *err = server_strdupf("%s '%s': the certificate is not valid before %s", key, path, when);
        rc = -EINVAL;
    }
    for (unsigned int i = 0; i < n; i++)
        gnutls_x509_crt_deinit(crts[i]);
    gnutls_free(crts);
    return rc;
}

/* The key parses (and is not encrypted), and belongs to the certificate. */
static int tls_check_key(const struct server_options *o, const struct server_pems *p, char **err)
{
    if (strstr(p->key, "-----BEGIN") == NULL || strstr(p->key, "PRIVATE KEY-----") == NULL) {
        *err = server_strdupf("HttpsPrivateKey '%s': not a PEM private key (no '-----BEGIN ... PRIVATE "
                        "KEY-----' line)",
                        o->tls_key);
        return -EINVAL;
    }
    if (strstr(p->key, "ENCRYPTED") != NULL) {
        *err = server_strdupf("HttpsPrivateKey '%s': the key is encrypted; memtrim needs it without a "
                        "passphrase (protect it with its file mode, chmod 600)",
                        o->tls_key);
        return -EINVAL;
    }
    gnutls_certificate_credentials_t cred;
    if (gnutls_certificate_allocate_credentials(&cred) < 0) {
        *err = server_strdupf("HttpsPrivateKey '%s': out of memory", o->tls_key);
        return -ENOMEM;
    }
    gnutls_datum_t c = {.data = (unsigned char *)p->cert, .size = (unsigned)p->cert_len};
    gnutls_datum_t k = {.data = (unsigned char *)p->key, .size = (unsigned)p->key_len};
    int g = gnutls_certificate_set_x509_key_mem2(cred, &c, &k, GNUTLS_X509_FMT_PEM, NULL, 0);
    gnutls_certificate_free_credentials(cred);
    if (g == GNUTLS_E_CERTIFICATE_KEY_MISMATCH) {
        *err = server_strdupf("HttpsPrivateKey '%s' does not match the certificate in HttpsCertificate "
                        "'%s' (another key pair)",
                        o->tls_key, o->tls_cert);
        return -EINVAL;
    }
    if (g < 0) {
        *err = server_strdupf("HttpsPrivateKey '%s': not a usable private key: %s", o->tls_key,
                        gnutls_strerror(g));
        return -EINVAL;
    }
    return 0;
}

void server_pems_free(struct server_pems *p)
{
    if (p == NULL)
        return;
    if (p->key) {
        explicit_bzero(p->key, p->key_len);
        free(p->key);
    }
    free(p->cert);
    free(p->ca);
    free(p);
}

int server_tls_load(const struct server_options *o, struct server_pems **out, char **err)
{
    *out = NULL;
    *err = NULL;
    struct server_pems *p = mt_calloc(1, sizeof(*p));
    if (p == NULL) {
        *err = server_strdupf("out of memory");
        return -ENOMEM;
    }
    int rc = tls_read_file("HttpsCertificate", o->tls_cert, 0, &p->cert, &p->cert_len,
                           &p->id[0], err);
    if (rc == 0)
        rc = tls_check_certs("HttpsCertificate", o->tls_cert, p->cert, p->cert_len, 1, err);
    if (rc == 0)
        rc = tls_read_file("HttpsPrivateKey", o->tls_key, 1, &p->key, &p->key_len, &p->id[1],
                           err);
    if (rc == 0)
        rc = tls_check_key(o, p, err);
    if (rc == 0 && o->tls_ca[0]) {
        rc = tls_read_file("HttpsClientCA", o->tls_ca, 0, &p->ca, &p->ca_len, &p->id[2], err);
        if (rc == 0)
            rc = tls_check_certs("HttpsClientCA", o->tls_ca, p->ca, p->ca_len, 1, err);
    }
    if (rc) {
        server_pems_free(p);
        return rc;
    }
    *out = p;
    return 0;
}

int server_tls_available(char **err)
{
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) == MHD_YES)
        return 0;
    *err = server_strdupf("HttpsCertificate is set, but this libmicrohttpd was built without TLS "
                    "(MHD_FEATURE_TLS); install one built with GnuTLS (Debian's is) or drop "
                    "HttpsCertificate");
    return -ENOTSUP;
}

/* Mutual TLS: the peer sent a certificate that HttpsClientCA signed and that is valid now. */
int server_tls_peer_ok(struct MHD_Connection *conn, char *why, size_t whylen)
{
    const union MHD_ConnectionInfo *i =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    gnutls_session_t session = i ? (gnutls_session_t)i->tls_session : NULL;
    if (session == NULL) {
        snprintf(why, whylen, "no TLS session");
        return 0;
    }
    unsigned int nlist = 0;
    if (gnutls_certificate_get_peers(session, &nlist) == NULL || nlist == 0) {
        snprintf(why, whylen, "no client certificate was sent; this server requires one "
                              "signed by its HttpsClientCA");
        return 0;
    }
    unsigned int status = 0;
    int g = gnutls_certificate_verify_peers2(session, &status);
    if (g < 0) {
        snprintf(why, whylen, "the client certificate could not be checked: %s",
                 gnutls_strerror(g));
        return 0;
    }
    if (status != 0) {
        gnutls_datum_t out = {0};
        if (gnutls_certificate_verification_status_print(status, GNUTLS_CRT_X509, &out, 0) == 0) {
            snprintf(why, whylen, "the client certificate is not accepted: %.*s",
                     (int)out.size, (const char *)out.data);
            gnutls_free(out.data);
        } else {
            snprintf(why, whylen, "the client certificate is not accepted (status 0x%x)", status);
        }
        return 0;
    }
    return 1;
}

// The inference gate's TLS (see ahs_tls.h). OpenSSL 3 from the distribution: the key of the
// per-run authority is made here and never written anywhere; leaves share one key of their
// own, so a leaked leaf key could impersonate only the hosts the authority's name
// constraints permit, and only for this run.
#include "ahs_tls.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AHS_MAX_LEAVES 64

struct leaf {
    char host[256];
    SSL_CTX *ctx;
};

struct ahs_tls_authority {
    EVP_PKEY *key;
    EVP_PKEY *leaf_key;
    X509 *cert;
    int days;
    pthread_mutex_t lock;
    struct leaf leaves[AHS_MAX_LEAVES];
    int count;
};

struct ahs_tls_upstream {
    SSL_CTX *ctx;
};

struct ahs_tls_conn {
    SSL *ssl;
};

/* `what`, and OpenSSL's first queued error if there is one. */
static void fail(char *err, size_t len, const char *what) {
    unsigned long e = ERR_get_error();
    char detail[256] = "";
    if (e) ERR_error_string_n(e, detail, sizeof detail);
    if (err && len) snprintf(err, len, "%s%s%s", what, e ? ": " : "", detail);
    ERR_clear_error();
}

/* Host names reach the extension syntax below; anything outside this set is refused first. */
static int plain_host(const char *h) {
    size_t n = strlen(h);
    if (n == 0 || n > 253) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = h[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == ':';
        if (!ok) return 0;
    }
    return 1;
}

static int ip_literal(const char *h, int *family) {
    unsigned char buf[16];
    if (inet_pton(AF_INET, h, buf) == 1) { *family = AF_INET; return 1; }
    if (inet_pton(AF_INET6, h, buf) == 1) { *family = AF_INET6; return 1; }
    return 0;
}

static int add_ext(X509 *cert, X509 *issuer, int nid, const char *value) {
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer, cert, NULL, NULL, 0);
    X509_EXTENSION *ex = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    if (!ex) return 0;
    int ok = X509_add_ext(cert, ex, -1);
    X509_EXTENSION_free(ex);
    return ok;
}

/* Version 3, a random positive 127-bit serial, valid from an hour ago for `days`. */
static X509 *new_cert(EVP_PKEY *pub, int days) {
    X509 *c = X509_new();
    if (!c) return NULL;
    unsigned char serial[16];
    BIGNUM *bn = NULL;
    if (RAND_bytes(serial, sizeof serial) != 1) goto bad;
    serial[0] &= 0x7f;
    serial[0] |= 0x40;
    bn = BN_bin2bn(serial, sizeof serial, NULL);
    if (!bn || !BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(c))) goto bad;
    BN_free(bn);
    bn = NULL;
    if (!X509_set_version(c, 2) || !X509_gmtime_adj(X509_getm_notBefore(c), -3600) ||
        !X509_gmtime_adj(X509_getm_notAfter(c), (long)days * 86400) || !X509_set_pubkey(c, pub))
        goto bad;
    return c;
bad:
    BN_free(bn);
    X509_free(c);
    return NULL;
}

ahs_tls_authority *ahs_tls_authority_new(const char *const *permitted, int n, int days, char *err, size_t errlen) {
    if (n <= 0 || days <= 0) {
        snprintf(err, errlen, "an authority needs at least one permitted host and a validity");
        return NULL;
    }
    // "critical,permitted;DNS:a,permitted;DNS:b,...". Address literals get no subtree: a CA
    // whose constraints list any IP range is refused outright by some clients whatever the
    // leaf (Claude Code's, measured: a gate for 127.0.0.2 could not be used at all), so IP
    // names stay unconstrained (the gate mints leaves only for its targets; the key never
    // leaves this process) while DNS names stay locked: with no named host, to `invalid`
    // (RFC 6761), which no real name is under.
    size_t cap = 48 + (size_t)n * (300 + 80);
    char *constraints = malloc(cap);
    if (!constraints) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    size_t used = (size_t)snprintf(constraints, cap, "critical");
    int named = 0;
    for (int i = 0; i < n; i++) {
        const char *h = permitted[i];
        int family = 0;
        if (!plain_host(h)) {
            snprintf(err, errlen, "not a host name or address literal: %.80s", h);
            free(constraints);
            return NULL;
        }
        if (!ip_literal(h, &family)) {
            used += (size_t)snprintf(constraints + used, cap - used, ",permitted;DNS:%s", h);
            named++;
        }
    }
    if (named == 0) used += (size_t)snprintf(constraints + used, cap - used, ",permitted;DNS:invalid");

    ahs_tls_authority *a = calloc(1, sizeof *a);
    if (!a) {
        free(constraints);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&a->lock, NULL);
    a->days = days;
    a->key = EVP_EC_gen("P-256");
    a->leaf_key = EVP_EC_gen("P-256");
    if (!a->key || !a->leaf_key) {
        fail(err, errlen, "generating a P-256 key");
        goto bad;
    }
    a->cert = new_cert(a->key, days);
    if (!a->cert) {
        fail(err, errlen, "making the CA certificate");
        goto bad;
    }
    X509_NAME *name = X509_get_subject_name(a->cert);
    if (!X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, (const unsigned char *)"autoharness", -1, -1, 0) ||
        !X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"autoharness inference gate (one run)", -1, -1, 0) ||
        !X509_set_issuer_name(a->cert, name) ||
        !add_ext(a->cert, a->cert, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") ||
        !add_ext(a->cert, a->cert, NID_key_usage, "critical,keyCertSign,cRLSign") ||
        !add_ext(a->cert, a->cert, NID_subject_key_identifier, "hash") ||
        !add_ext(a->cert, a->cert, NID_authority_key_identifier, "keyid:always") ||
        !add_ext(a->cert, a->cert, NID_name_constraints, constraints) ||
        !X509_sign(a->cert, a->key, EVP_sha256())) {
        fail(err, errlen, "making the CA certificate");
        goto bad;
    }
    free(constraints);
    return a;
bad:
    free(constraints);
    ahs_tls_authority_free(a);
    return NULL;
}

long ahs_tls_authority_pem(ahs_tls_authority *a, char *buf, size_t cap) {
    BIO *b = BIO_new(BIO_s_mem());
    if (!b) return -1;
    long n = -1;
    if (PEM_write_bio_X509(b, a->cert)) {
        char *data;
        long len = BIO_get_mem_data(b, &data);
        if (len >= 0 && (size_t)len <= cap) {
            memcpy(buf, data, (size_t)len);
            n = len;
        }
    }
    BIO_free(b);
    return n;
}

void ahs_tls_authority_free(ahs_tls_authority *a) {
    if (!a) return;
    for (int i = 0; i < a->count; i++) SSL_CTX_free(a->leaves[i].ctx);
    X509_free(a->cert);
    EVP_PKEY_free(a->key);
    EVP_PKEY_free(a->leaf_key);
    pthread_mutex_destroy(&a->lock);
    free(a);
}

/* Only HTTP/1.1: the gate reads requests as HTTP/1.1. A client offering ALPN without it
   is refused in the handshake; one offering none gets HTTP/1.1 anyway. */
static int select_http11(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
                         unsigned int inlen, void *arg) {
    (void)ssl;
    (void)arg;
    for (unsigned int i = 0; i < inlen;) {
        unsigned int l = in[i];
        if (i + 1 + l > inlen) break;
        if (l == 8 && memcmp(in + i + 1, "http/1.1", 8) == 0) {
            *out = in + i + 1;
            *outlen = 8;
            return SSL_TLSEXT_ERR_OK;
        }
        i += 1 + l;
    }
    return SSL_TLSEXT_ERR_ALERT_FATAL;
}

static SSL_CTX *leaf_context(ahs_tls_authority *a, const char *host, char *err, size_t errlen) {
    int family = 0;
    char san[300];
    if (!plain_host(host)) {
        snprintf(err, errlen, "not a host name or address literal: %.80s", host);
        return NULL;
    }
    snprintf(san, sizeof san, "%s:%s", ip_literal(host, &family) ? "IP" : "DNS", host);
    X509 *c = new_cert(a->leaf_key, a->days);
    SSL_CTX *ctx = NULL;
    if (!c) goto bad;
    X509_NAME *name = X509_get_subject_name(c);
    // A CN for names only: clients that check name constraints read a CN that looks like a
    // host name (an IPv4 literal does) against the DNS subtrees, which an address is not in.
    if (!family && strlen(host) <= 64 && !X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)host, -1, -1, 0)) goto bad;
    if (!X509_set_issuer_name(c, X509_get_subject_name(a->cert)) ||
        !add_ext(c, a->cert, NID_subject_alt_name, san) ||
        !add_ext(c, a->cert, NID_basic_constraints, "critical,CA:FALSE") ||
        !add_ext(c, a->cert, NID_key_usage, "critical,digitalSignature") ||
        !add_ext(c, a->cert, NID_ext_key_usage, "serverAuth") ||
        !add_ext(c, a->cert, NID_subject_key_identifier, "hash") ||
        !add_ext(c, a->cert, NID_authority_key_identifier, "keyid:always") ||
        !X509_sign(c, a->key, EVP_sha256()))
        goto bad;
    ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx || !SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) || SSL_CTX_use_certificate(ctx, c) != 1 ||
        SSL_CTX_use_PrivateKey(ctx, a->leaf_key) != 1 || SSL_CTX_check_private_key(ctx) != 1)
        goto bad;
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_TICKET);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_alpn_select_cb(ctx, select_http11, NULL);
    X509_free(c);
    return ctx;
bad:
    fail(err, errlen, "making a leaf certificate");
    X509_free(c);
    SSL_CTX_free(ctx);
    return NULL;
}

/* A connection owning `ssl` (freed if that fails). */
static ahs_tls_conn *wrap(SSL *ssl) {
    ahs_tls_conn *c = malloc(sizeof *c);
    if (!c) {
        SSL_free(ssl);
        return NULL;
    }
    c->ssl = ssl;
    return c;
}

ahs_tls_conn *ahs_tls_accept(ahs_tls_authority *a, int fd, const char *host, char *err, size_t errlen) {
    SSL_CTX *ctx = NULL;
    int cached = 0;
    pthread_mutex_lock(&a->lock);
    for (int i = 0; i < a->count; i++)
        if (strcmp(a->leaves[i].host, host) == 0) {
            ctx = a->leaves[i].ctx;
            cached = 1;
            break;
        }
    if (!ctx) {
        ctx = leaf_context(a, host, err, errlen);
        if (ctx && a->count < AHS_MAX_LEAVES && strlen(host) < sizeof a->leaves[0].host) {
            strcpy(a->leaves[a->count].host, host);
            a->leaves[a->count].ctx = ctx;
            a->count++;
            cached = 1;
        }
    }
    pthread_mutex_unlock(&a->lock);
    if (!ctx) return NULL;
    SSL *ssl = SSL_new(ctx);  // holds its own reference to ctx
    if (!cached) SSL_CTX_free(ctx);
    if (!ssl || !SSL_set_fd(ssl, fd)) {
        fail(err, errlen, "SSL_new");
        SSL_free(ssl);
        return NULL;
    }
    if (SSL_accept(ssl) != 1) {
        fail(err, errlen, "TLS handshake with the sandbox");
        SSL_free(ssl);
        return NULL;
    }
    return wrap(ssl);
}

ahs_tls_upstream *ahs_tls_upstream_new(const char *extra_ca_file, char *err, size_t errlen) {
    ahs_tls_upstream *u = calloc(1, sizeof *u);
    if (!u) return NULL;
    u->ctx = SSL_CTX_new(TLS_client_method());
    if (!u->ctx || !SSL_CTX_set_min_proto_version(u->ctx, TLS1_2_VERSION) || SSL_CTX_set_default_verify_paths(u->ctx) != 1) {
        fail(err, errlen, "the upstream TLS context");
        ahs_tls_upstream_free(u);
        return NULL;
    }
    if (extra_ca_file && SSL_CTX_load_verify_locations(u->ctx, extra_ca_file, NULL) != 1) {
        fail(err, errlen, "loading the upstream CA file");
        ahs_tls_upstream_free(u);
        return NULL;
    }
    SSL_CTX_set_verify(u->ctx, SSL_VERIFY_PEER, NULL);
    SSL_CTX_set_options(u->ctx, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
    static const unsigned char alpn[] = "\x08http/1.1";
    SSL_CTX_set_alpn_protos(u->ctx, alpn, sizeof alpn - 1);
    return u;
}

void ahs_tls_upstream_free(ahs_tls_upstream *u) {
    if (!u) return;
    SSL_CTX_free(u->ctx);
    free(u);
}

ahs_tls_conn *ahs_tls_connect(ahs_tls_upstream *u, int fd, const char *host, char *err, size_t errlen) {
    SSL *ssl = SSL_new(u->ctx);
    int family = 0;
    if (!ssl || !SSL_set_fd(ssl, fd)) {
        fail(err, errlen, "SSL_new");
        SSL_free(ssl);
        return NULL;
    }
    int named;
    if (ip_literal(host, &family))
        named = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host);
    else
        named = SSL_set_tlsext_host_name(ssl, host) && SSL_set1_host(ssl, host);
    if (!named) {
        fail(err, errlen, "setting the upstream name");
        SSL_free(ssl);
        return NULL;
    }
    if (SSL_connect(ssl) != 1) {
        long v = SSL_get_verify_result(ssl);
        if (v != X509_V_OK) {
            snprintf(err, errlen, "upstream certificate of %.80s not accepted: %s", host, X509_verify_cert_error_string(v));
            ERR_clear_error();
        } else {
            fail(err, errlen, "TLS handshake with the upstream");
        }
        SSL_free(ssl);
        return NULL;
    }
    return wrap(ssl);
}

ssize_t ahs_tls_read(ahs_tls_conn *c, void *buf, size_t n) {
    size_t got = 0;
    if (SSL_read_ex(c->ssl, buf, n, &got) == 1) return (ssize_t)got;
    int e = SSL_get_error(c->ssl, 0);
    ERR_clear_error();
    return e == SSL_ERROR_ZERO_RETURN ? 0 : -1;
}

int ahs_tls_write_all(ahs_tls_conn *c, const void *buf, size_t n) {
    size_t written = 0;
    while (written < n) {
        size_t w = 0;
        if (SSL_write_ex(c->ssl, (const char *)buf + written, n - written, &w) != 1) {
            ERR_clear_error();
            return -1;
        }
        written += w;
    }
    return 0;
}

void ahs_tls_close(ahs_tls_conn *c) {
    if (!c) return;
    SSL_shutdown(c->ssl);
    ERR_clear_error();
    SSL_free(c->ssl);
    free(c);
}

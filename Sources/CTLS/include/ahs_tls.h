// TLS for the egress proxy's inference gate (OpenSSL): a per-run certificate authority that
// signs a leaf for each inference host a sandbox connects to, the sandbox-facing server side,
// and the verified client side towards the real vendor. Blocking descriptors; the caller
// sets SO_RCVTIMEO/SO_SNDTIMEO. Errors are written into `err` (NUL-terminated).
#ifndef AUTOHARNESS_AHS_TLS_H
#define AUTOHARNESS_AHS_TLS_H
#include <stddef.h>
#include <sys/types.h>
#ifdef __cplusplus
extern "C" {
#endif

typedef struct ahs_tls_authority ahs_tls_authority;
typedef struct ahs_tls_upstream ahs_tls_upstream;
typedef struct ahs_tls_conn ahs_tls_conn;

/* A new authority: a fresh P-256 key that never leaves this process, a self-signed CA
   certificate valid for `days` whose name constraints permit only `permitted[0..n)` (host
   names, or IPv4/IPv6 literals): a leaf it signed for any other name fails verification in
   every client that checks constraints. NULL on failure. */
ahs_tls_authority *ahs_tls_authority_new(const char *const *permitted, int n, int days, char *err, size_t errlen);
/* The CA certificate as PEM into buf; its length, or -1 when it does not fit. */
long ahs_tls_authority_pem(ahs_tls_authority *a, char *buf, size_t cap);
void ahs_tls_authority_free(ahs_tls_authority *a);

/* TLS server side on `fd`, presenting a leaf for `host` signed by `a` (made once per host and
   kept), TLS 1.2 or later, ALPN only http/1.1. NULL on failure (the handshake's error). */
ahs_tls_conn *ahs_tls_accept(ahs_tls_authority *a, int fd, const char *host, char *err, size_t errlen);

/* Trust for upstream connections: the system's default store plus, if not NULL, the PEM
   certificates of `extra_ca_file`. NULL on failure. */
ahs_tls_upstream *ahs_tls_upstream_new(const char *extra_ca_file, char *err, size_t errlen);
void ahs_tls_upstream_free(ahs_tls_upstream *u);
/* TLS client side on `fd`: SNI `host` (not for IP literals), the peer's chain verified and its
   name (or IP) matched to `host`. NULL on failure. */
ahs_tls_conn *ahs_tls_connect(ahs_tls_upstream *u, int fd, const char *host, char *err, size_t errlen);

/* Up to n bytes: >0 read, 0 at the end of the stream (close_notify or the peer's close), -1 on error. */
ssize_t ahs_tls_read(ahs_tls_conn *c, void *buf, size_t n);
/* All n bytes, or -1. */
int ahs_tls_write_all(ahs_tls_conn *c, const void *buf, size_t n);
/* Sends close_notify (best effort) and frees the connection; the descriptor stays open. */
void ahs_tls_close(ahs_tls_conn *c);

#ifdef __cplusplus
}
#endif
#endif

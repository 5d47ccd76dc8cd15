#ifndef CCURL_H
#define CCURL_H
#include <curl/curl.h>

/*
 * libcurl, loaded on first use (dlopen "libcurl.so.4") rather than linked: a bridge with no HTTP adapter
 * (LIFX cloud, Electric Imp, Livecoding) then never maps libcurl and the two dozen libraries it pulls in
 * (GnuTLS, Kerberos, LDAP, SSH, ...), whose load-time initialisers alone keep about 4 MB resident.
 * Only the curl.h types are used at compile time; every call goes through the functions below.
 */

/* NULL once libcurl is loaded and initialised (curl_global_init), else why not. Thread-safe; loads once. */
const char *ccurl_load(void);

CURL *ccurl_easy_init(void);
void ccurl_easy_cleanup(CURL *h);
const char *ccurl_easy_strerror(CURLcode code);
CURLM *ccurl_multi_init(void);
CURLMcode ccurl_multi_cleanup(CURLM *m);
CURLMcode ccurl_multi_add_handle(CURLM *m, CURL *h);
CURLMcode ccurl_multi_remove_handle(CURLM *m, CURL *h);
CURLMcode ccurl_multi_perform(CURLM *m, int *running);
CURLMcode ccurl_multi_poll(CURLM *m, struct curl_waitfd *fds, unsigned int n, int timeout_ms, int *numfds);
CURLMcode ccurl_multi_wakeup(CURLM *m);
CURLMsg *ccurl_multi_info_read(CURLM *m, int *left);
struct curl_slist *ccurl_slist_append(struct curl_slist *list, const char *s);
void ccurl_slist_free_all(struct curl_slist *list);

/* Swift does not import C variadic functions: typed forms of the ones we use. */
CURLcode ccurl_easy_setopt_long(CURL *h, CURLoption o, long v);
CURLcode ccurl_easy_setopt_string(CURL *h, CURLoption o, const char *v);
CURLcode ccurl_easy_setopt_pointer(CURL *h, CURLoption o, void *v);
CURLcode ccurl_easy_setopt_slist(CURL *h, CURLoption o, struct curl_slist *v);
CURLcode ccurl_easy_setopt_off(CURL *h, CURLoption o, curl_off_t v);
CURLcode ccurl_easy_setopt_write(CURL *h, CURLoption o, size_t (*f)(char *, size_t, size_t, void *));
/* CURLOPT_PREREQFUNCTION (libcurl 7.80): called once the connection is up, right before the request is sent. */
CURLcode ccurl_easy_setopt_prereq(CURL *h, curl_prereq_callback f);
CURLcode ccurl_easy_getinfo_long(CURL *h, CURLINFO i, long *v);
CURLcode ccurl_easy_getinfo_pointer(CURL *h, CURLINFO i, void **v);
CURLMcode ccurl_multi_setopt_long(CURLM *m, CURLMoption o, long v);

/* CURLMsg.data is a union; give Swift a plain accessor. */
static inline CURLcode ccurl_msg_result(const CURLMsg *m) { return m->data.result; }
#endif

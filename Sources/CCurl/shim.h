#ifndef CCURL_SHIM_H
#define CCURL_SHIM_H
#include <curl/curl.h>

/* Swift does not import C variadic functions: typed wrappers for the ones we use. */
static inline CURLcode ccurl_easy_setopt_long(CURL *h, CURLoption o, long v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode ccurl_easy_setopt_string(CURL *h, CURLoption o, const char *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode ccurl_easy_setopt_pointer(CURL *h, CURLoption o, void *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode ccurl_easy_setopt_slist(CURL *h, CURLoption o, struct curl_slist *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode ccurl_easy_setopt_off(CURL *h, CURLoption o, curl_off_t v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode ccurl_easy_setopt_write(CURL *h, CURLoption o, size_t (*f)(char *, size_t, size_t, void *)) { return curl_easy_setopt(h, o, f); }
static inline CURLcode ccurl_easy_getinfo_long(CURL *h, CURLINFO i, long *v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode ccurl_easy_getinfo_double(CURL *h, CURLINFO i, double *v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode ccurl_easy_getinfo_pointer(CURL *h, CURLINFO i, void **v) { return curl_easy_getinfo(h, i, v); }
static inline CURLMcode ccurl_multi_setopt_long(CURLM *m, CURLMoption o, long v) { return curl_multi_setopt(m, o, v); }
/* CURLMsg.data is a union; give Swift a plain accessor. */
static inline CURLcode ccurl_msg_result(const CURLMsg *m) { return m->data.result; }
#endif

#include "ccurl.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

static struct {
    CURLcode (*global_init)(long);
    CURL *(*easy_init)(void);
    void (*easy_cleanup)(CURL *);
    const char *(*easy_strerror)(CURLcode);
    CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
    CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
    CURLM *(*multi_init)(void);
    CURLMcode (*multi_cleanup)(CURLM *);
    CURLMcode (*multi_add_handle)(CURLM *, CURL *);
    CURLMcode (*multi_remove_handle)(CURLM *, CURL *);
    CURLMcode (*multi_perform)(CURLM *, int *);
    CURLMcode (*multi_poll)(CURLM *, struct curl_waitfd *, unsigned int, int, int *);
    CURLMcode (*multi_wakeup)(CURLM *);
    CURLMsg *(*multi_info_read)(CURLM *, int *);
    CURLMcode (*multi_setopt)(CURLM *, CURLMoption, ...);
    struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
    void (*slist_free_all)(struct curl_slist *);
} api;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char error[512];

static void load(void) {
    void *lib = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(error, sizeof error, "libcurl could not be loaded (install libcurl4): %s", dlerror());
        return;
    }
#define SYM(field, name)                                                                    \
    if (!(*(void **)&api.field = dlsym(lib, name))) {                                       \
        snprintf(error, sizeof error, "libcurl.so.4 has no %s: %s", name, dlerror());       \
        return;                                                                             \
    }
    SYM(global_init, "curl_global_init")
    SYM(easy_init, "curl_easy_init")
    SYM(easy_cleanup, "curl_easy_cleanup")
    SYM(easy_strerror, "curl_easy_strerror")
    SYM(easy_setopt, "curl_easy_setopt")
    SYM(easy_getinfo, "curl_easy_getinfo")
    SYM(multi_init, "curl_multi_init")
    SYM(multi_cleanup, "curl_multi_cleanup")
    SYM(multi_add_handle, "curl_multi_add_handle")
    SYM(multi_remove_handle, "curl_multi_remove_handle")
    SYM(multi_perform, "curl_multi_perform")
    SYM(multi_poll, "curl_multi_poll")
    SYM(multi_wakeup, "curl_multi_wakeup")
    SYM(multi_info_read, "curl_multi_info_read")
    SYM(multi_setopt, "curl_multi_setopt")
    SYM(slist_append, "curl_slist_append")
    SYM(slist_free_all, "curl_slist_free_all")
#undef SYM
    CURLcode rc = api.global_init(CURL_GLOBAL_DEFAULT);
    if (rc != CURLE_OK) snprintf(error, sizeof error, "curl_global_init failed: %s", api.easy_strerror(rc));
}

const char *ccurl_load(void) {
    pthread_once(&once, load);
    return error[0] ? error : NULL;
}

CURL *ccurl_easy_init(void) { return api.easy_init(); }
void ccurl_easy_cleanup(CURL *h) { api.easy_cleanup(h); }
const char *ccurl_easy_strerror(CURLcode code) { return api.easy_strerror(code); }
CURLM *ccurl_multi_init(void) { return api.multi_init(); }
CURLMcode ccurl_multi_cleanup(CURLM *m) { return api.multi_cleanup(m); }
CURLMcode ccurl_multi_add_handle(CURLM *m, CURL *h) { return api.multi_add_handle(m, h); }
CURLMcode ccurl_multi_remove_handle(CURLM *m, CURL *h) { return api.multi_remove_handle(m, h); }
CURLMcode ccurl_multi_perform(CURLM *m, int *running) { return api.multi_perform(m, running); }
CURLMcode ccurl_multi_poll(CURLM *m, struct curl_waitfd *fds, unsigned int n, int timeout_ms, int *numfds) {
    return api.multi_poll(m, fds, n, timeout_ms, numfds);
}
CURLMcode ccurl_multi_wakeup(CURLM *m) { return api.multi_wakeup(m); }
CURLMsg *ccurl_multi_info_read(CURLM *m, int *left) { return api.multi_info_read(m, left); }
struct curl_slist *ccurl_slist_append(struct curl_slist *list, const char *s) { return api.slist_append(list, s); }
void ccurl_slist_free_all(struct curl_slist *list) { api.slist_free_all(list); }

CURLcode ccurl_easy_setopt_long(CURL *h, CURLoption o, long v) { return api.easy_setopt(h, o, v); }
CURLcode ccurl_easy_setopt_string(CURL *h, CURLoption o, const char *v) { return api.easy_setopt(h, o, v); }
CURLcode ccurl_easy_setopt_pointer(CURL *h, CURLoption o, void *v) { return api.easy_setopt(h, o, v); }
CURLcode ccurl_easy_setopt_slist(CURL *h, CURLoption o, struct curl_slist *v) { return api.easy_setopt(h, o, v); }
CURLcode ccurl_easy_setopt_off(CURL *h, CURLoption o, curl_off_t v) { return api.easy_setopt(h, o, v); }
CURLcode ccurl_easy_setopt_write(CURL *h, CURLoption o, size_t (*f)(char *, size_t, size_t, void *)) {
    return api.easy_setopt(h, o, f);
}
CURLcode ccurl_easy_setopt_prereq(CURL *h, curl_prereq_callback f) {
    return api.easy_setopt(h, CURLOPT_PREREQFUNCTION, f);
}
CURLcode ccurl_easy_getinfo_long(CURL *h, CURLINFO i, long *v) { return api.easy_getinfo(h, i, v); }
CURLcode ccurl_easy_getinfo_pointer(CURL *h, CURLINFO i, void **v) { return api.easy_getinfo(h, i, v); }
CURLMcode ccurl_multi_setopt_long(CURLM *m, CURLMoption o, long v) { return api.multi_setopt(m, o, v); }

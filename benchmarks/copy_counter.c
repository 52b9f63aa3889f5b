/* Counts the bytes a process copies in large pieces, and the bytes it moves through sockets.
 *
 * Loaded with LD_PRELOAD (``copies.py`` builds and loads it): every memcpy / memmove / mempcpy
 * of at least COPY_COUNTER_MIN bytes (default 1 MiB) adds one to ``copies`` and its size to
 * ``copied``; every send / sendto / sendmsg / writev / recv / recvfrom / recvmsg adds what it moved to
 * ``sent`` / ``received`` (each such byte is one copy by the kernel, user to socket buffer or
 * back). A Python process reads them through ctypes (``copy_counter_read``); counts, not
 * times: the machine's load cannot move them.
 *
 * Calls that libc makes inside itself, and copies a compiler turned into inline code, are not
 * seen; numpy's and CPython's copies of large buffers go through memcpy / memmove.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <stdio.h>
#include <unistd.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

static atomic_long copies, copied, sent, received;
static size_t minimum = 1 << 20;
static void *(*real_memcpy)(void *, const void *, size_t);
static void *(*real_memmove)(void *, const void *, size_t);
static void *(*real_mempcpy)(void *, const void *, size_t);
static ssize_t (*real_send)(int, const void *, size_t, int);
static ssize_t (*real_sendto)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
static ssize_t (*real_sendmsg)(int, const struct msghdr *, int);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static ssize_t (*real_recv)(int, void *, size_t, int);
static ssize_t (*real_recvfrom)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
static ssize_t (*real_recvmsg)(int, struct msghdr *, int);
static int ready, traceable;
static atomic_int tracing;

/* COPY_COUNTER_TRACE=1: say where each counted copy comes from, on stderr, while copy_counter_trace(1)
 * holds: the Python lines running (when the copying thread holds the GIL), else the C functions
 * (numpy releases the GIL around large copies). */
typedef int (*gil_check_t)(void);
typedef void *(*get_frame_t)(void);
typedef int (*line_t)(void *);
typedef void *(*code_t)(void *);
typedef void *(*back_t)(void *);
typedef const char *(*utf8_t)(void *);
typedef void *(*attr_t)(void *, const char *);
typedef void (*decref_t)(void *);

static void where(size_t n) {
    gil_check_t gil = (gil_check_t)dlsym(RTLD_DEFAULT, "PyGILState_Check");
    get_frame_t frame_of = (get_frame_t)dlsym(RTLD_DEFAULT, "PyEval_GetFrame");
    line_t line = (line_t)dlsym(RTLD_DEFAULT, "PyFrame_GetLineNumber");
    code_t code_of = (code_t)dlsym(RTLD_DEFAULT, "PyFrame_GetCode");
    back_t back = (back_t)dlsym(RTLD_DEFAULT, "PyFrame_GetBack");
    attr_t attr = (attr_t)dlsym(RTLD_DEFAULT, "PyObject_GetAttrString");
    utf8_t utf8 = (utf8_t)dlsym(RTLD_DEFAULT, "PyUnicode_AsUTF8");
    decref_t decref = (decref_t)dlsym(RTLD_DEFAULT, "Py_DecRef");
    char text[2048];
    int at = snprintf(text, sizeof text, "COPY %zu", n);
    if (gil && frame_of && gil()) {
        void *frame = frame_of();           /* borrowed */
        void *held = NULL;
        for (int depth = 0; frame && depth < 4 && at < (int)sizeof text - 200; depth++) {
            void *code = code_of(frame);
            void *file = attr(code, "co_filename");
            void *name = attr(code, "co_name");
            at += snprintf(text + at, sizeof text - at, " <- %s:%d %s", file ? utf8(file) : "?", line(frame),
                           name ? utf8(name) : "?");
            if (file) decref(file);
            if (name) decref(name);
            decref(code);
            void *next = back(frame);       /* a new reference */
            if (held) decref(held);
            held = frame = next;
        }
        if (held) decref(held);
    } else {
        void *stack[8];
        int k = backtrace(stack, 8);
        char **names = backtrace_symbols(stack, k);
        for (int i = 1; names && i < k && at < (int)sizeof text - 200; i++)
            at += snprintf(text + at, sizeof text - at, " <- %s", names[i]);
        free(names);
    }
    text[at < (int)sizeof text - 1 ? at : (int)sizeof text - 2] = '\n';
    write(2, text, (at < (int)sizeof text - 1 ? at : (int)sizeof text - 2) + 1);
}

/* Used while dlsym itself copies (before the real functions are known). */
static void *plain_copy(void *dst, const void *src, size_t n) {
    unsigned char *d = dst;
    const unsigned char *s = src;
    if (d < s) {
        for (size_t i = 0; i < n; i++) d[i] = s[i];
    } else {
        for (size_t i = n; i > 0; i--) d[i - 1] = s[i - 1];
    }
    return dst;
}

__attribute__((constructor)) static void init(void) {
    real_memcpy = dlsym(RTLD_NEXT, "memcpy");
    real_memmove = dlsym(RTLD_NEXT, "memmove");
    real_mempcpy = dlsym(RTLD_NEXT, "mempcpy");
    real_send = dlsym(RTLD_NEXT, "send");
    real_sendto = dlsym(RTLD_NEXT, "sendto");
    real_sendmsg = dlsym(RTLD_NEXT, "sendmsg");
    real_writev = dlsym(RTLD_NEXT, "writev");
    real_recv = dlsym(RTLD_NEXT, "recv");
    real_recvfrom = dlsym(RTLD_NEXT, "recvfrom");
    real_recvmsg = dlsym(RTLD_NEXT, "recvmsg");
    const char *given = getenv("COPY_COUNTER_MIN");
    if (given) minimum = (size_t)strtoull(given, NULL, 10);
    given = getenv("COPY_COUNTER_TRACE");
    traceable = given && *given == '1';
    ready = 1;
}

static __thread int inside;               /* no counting of the tracer's own copies */

static inline void count(size_t n) {
    if (n >= minimum && !inside) {
        atomic_fetch_add(&copies, 1);
        atomic_fetch_add(&copied, (long)n);
        if (atomic_load(&tracing)) {
            inside = 1;
            where(n);
            inside = 0;
        }
    }
}

void *memcpy(void *dst, const void *src, size_t n) {
    if (!ready || !real_memcpy) return plain_copy(dst, src, n);
    count(n);
    return real_memcpy(dst, src, n);
}

void *memmove(void *dst, const void *src, size_t n) {
    if (!ready || !real_memmove) return plain_copy(dst, src, n);
    count(n);
    return real_memmove(dst, src, n);
}

void *mempcpy(void *dst, const void *src, size_t n) {
    if (!ready || !real_mempcpy) return (char *)plain_copy(dst, src, n) + n;
    count(n);
    return real_mempcpy(dst, src, n);
}

static inline ssize_t moved(atomic_long *total, ssize_t n) {
    if (n > 0) atomic_fetch_add(total, (long)n);
    return n;
}

ssize_t send(int fd, const void *buf, size_t n, int flags) {
    return moved(&sent, real_send(fd, buf, n, flags));
}

ssize_t sendto(int fd, const void *buf, size_t n, int flags, const struct sockaddr *to, socklen_t len) {
    return moved(&sent, real_sendto(fd, buf, n, flags, to, len));
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags) {
    return moved(&sent, real_sendmsg(fd, msg, flags));
}

/* The server writes large answers to its socket with writev (counted as sent: the copies.py runs
 * write no files with it). */
ssize_t writev(int fd, const struct iovec *iov, int count) {
    return moved(&sent, real_writev(fd, iov, count));
}

ssize_t recv(int fd, void *buf, size_t n, int flags) {
    return moved(&received, real_recv(fd, buf, n, flags));
}

ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *from, socklen_t *len) {
    return moved(&received, real_recvfrom(fd, buf, n, flags, from, len));
}

ssize_t recvmsg(int fd, struct msghdr *msg, int flags) {
    return moved(&received, real_recvmsg(fd, msg, flags));
}

/* Trace (with COPY_COUNTER_TRACE=1) from now on (on != 0), or no more. */
void copy_counter_trace(int on) {
    atomic_store(&tracing, on && traceable);
}

/* copies, bytes copied, bytes sent, bytes received: so far. */
void copy_counter_read(long out[4]) {
    out[0] = atomic_load(&copies);
    out[1] = atomic_load(&copied);
    out[2] = atomic_load(&sent);
    out[3] = atomic_load(&received);
}

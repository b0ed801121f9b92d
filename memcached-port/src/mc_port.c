/* mc_port.c — memcached with one thread per connection.
 *
 * The same file builds loom-memcached (compiled through loom/pthread.h with
 * LOOM_PTHREAD_IO: every pthread here is a fibre, poll and usleep block the
 * fibre) and memcached-tpc (plain pthreads: kernel threads). The only
 * difference is mc_port_init's processor count under loom.
 *
 * The rule for LIBEVENT_THREAD. A worker's LIBEVENT_THREAD holds caches used
 * without locks (read buffers, response objects, the LRU bump buffer, its
 * logger). In vanilla memcached one kernel thread runs all of that worker's
 * connections, so they never run at once. Here each worker has a gate (a
 * mutex): a connection's thread holds its worker's gate while memcached's
 * state machine runs for it, and the worker's own thread holds it while it
 * serves its notify pipe. So at most one state machine per worker runs at a
 * time, as in vanilla, whatever processor or kernel thread it runs on; and a
 * worker told to pause (pause_threads: hash expansion, slab rebalancing)
 * blocks in memcached's register_thread_initialized holding its gate, which
 * stops its connections as vanilla's paused worker does. Between runs a
 * connection holds nothing and waits for its socket with poll.
 *
 * At rest (loom-memcached, MC_PORT_REST unset or on). A connection waiting
 * for a request (EV_READ alone) has nothing live on its stack: everything
 * memcached keeps is in its conn, ours in its conn_start, both on the heap,
 * and the gate is not held. There its thread rests (loom_rest_until): it
 * ends where it stands, its stack goes back to its processor's cache, and
 * when the socket has input (or at the idle timeout) the same thread is
 * continued at conn_continue, which runs the turn the wait would have run
 * and re-enters the loop. So an idle connection holds no stack. A new
 * connection is started born at rest (loom_rest_start_until): no stack and
 * no thread record until it sends. Other waits (EV_WRITE, UDP's shared
 * socket, listeners) stay on the stack, with poll.
 *
 * Listening connections have no worker; they share one accept gate, which
 * the one-second clock tick takes too (vanilla runs both on its main
 * thread). */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sysexits.h>
#include <time.h>
#include <unistd.h>

#include "memcached.h"
#include "mc_port.h"

#ifdef MC_PORT_LOOM
#define MC_PORT_NAME "loom-memcached"
#else
#define MC_PORT_NAME "memcached-tpc"
#endif

/* memcached.c (patched to drop `static`): false while accepting is paused
 * because a descriptor limit was hit (EMFILE). */
extern volatile bool allow_new_conns;

/* Stacks of connection threads: memcached's state machine with OpenSSL's
 * handshake and SASL under it (64 KiB, loom's default, is too tight). */
#define MC_PORT_STACK (256 * 1024)

static pthread_mutex_t *gates; /* one per worker, by index */
static int ngates;
static pthread_mutex_t accept_gate = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t worker_key; /* the worker a thread serves, if it is one */
static pthread_key_t released_key; /* set once conn_close released the thread's connection */
static pthread_attr_t conn_attr;
#ifdef MC_PORT_LOOM
static loom_cluster_t *conn_cluster; /* -t processors: the connections' fibres */
/* Connections waiting for a request rest (MC_PORT_REST=0: they wait on
 * their stacks, as before). Read by every connection, cleared at most once. */
static bool rest_on = true;
#endif

static pthread_mutex_t *gate_of(LIBEVENT_THREAD *t) {
    if (t == NULL) return &accept_gate;
    return &gates[t - get_worker_thread(0)];
}

void mc_port_init(int nthreads, void *storage) {
    if (storage != NULL) {
        fprintf(stderr, "%s: extstore (-o ext_path) is not supported by the thread-per-connection port:"
                " its IO threads hand connections back through the worker's event loop, which the port"
                " replaces\n", MC_PORT_NAME);
        exit(EX_USAGE);
    }
#ifdef MC_PORT_LOOM
    /* -t N: a cluster of N processors runs the connections' fibres (made
     * with conn_attr, which names it). Everything else memcached starts —
     * workers, LRU maintainer and crawler, hash expansion, slab mover,
     * logger — stays in the default cluster, on processors of its own:
     * those threads run long loops without a scheduling point (moving
     * 65,536 buckets at an expansion: 46 ms), which in vanilla the kernel
     * preempts, and which must not hold a connections' processor. */
    int rc = loom_cluster_create(&conn_cluster, (size_t)nthreads);
    if (rc != 0) {
        fprintf(stderr, "%s: cannot make %d loom processors for -t: %s\n", MC_PORT_NAME, nthreads, strerror(rc));
        exit(EX_OSERR);
    }
#endif
    ngates = nthreads;
    gates = calloc((size_t)nthreads, sizeof(*gates));
    if (gates == NULL) {
        fprintf(stderr, "%s: out of memory\n", MC_PORT_NAME);
        exit(EX_OSERR);
    }
    for (int i = 0; i < nthreads; i++) pthread_mutex_init(&gates[i], NULL);
    pthread_key_create(&worker_key, NULL);
    pthread_key_create(&released_key, NULL);
#ifdef MC_PORT_LOOM
    const char *r = getenv("MC_PORT_REST");
    if (r != NULL && (!strcmp(r, "0") || !strcasecmp(r, "off") || !strcasecmp(r, "no") || !strcasecmp(r, "false")))
        __atomic_store_n(&rest_on, false, __ATOMIC_RELAXED);
#endif
    pthread_attr_init(&conn_attr);
    pthread_attr_setdetachstate(&conn_attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&conn_attr, MC_PORT_STACK);
#ifdef MC_PORT_LOOM
    loom_attr_setcluster(&conn_attr, conn_cluster);
#endif
}

int mc_port_conn_timeouts(void) { return 1; }

void mc_port_conn_release(int fd) {
    (void)fd;
    pthread_setspecific(released_key, &released_key);
}

/* Whether conn_close ran for the calling thread's connection. */
static bool released(void) { return pthread_getspecific(released_key) != NULL; }

struct conn_start {
    conn *c;
    LIBEVENT_THREAD *worker; /* NULL for a listening connection */
    void (*handler)(evutil_socket_t, short, void *);
    pthread_mutex_t *gate;
    short flags; /* what the state machine last asked for (c->ev_flags) */
};

/* Waits for what the state machine asked for. 1: ready, 0: idle timeout,
 * -1: the descriptor is gone. */
static int wait_conn(conn *c, short flags, int timeout_ms) {
    struct pollfd p = {.fd = c->sfd, .events = 0};
    if (flags & EV_READ) p.events |= POLLIN;
    if (flags & EV_WRITE) p.events |= POLLOUT;
    /* memcached asks for EV_WRITE to let other connections run after
     * reqs_per_event requests (or when the socket is full, where the poll
     * waits anyway): a socket with room is ready at once, so yield first,
     * as the event loop would. */
    if (flags & EV_WRITE) sched_yield();
    for (;;) {
        int n = poll(&p, 1, timeout_ms);
        if (n > 0) return (p.revents & POLLNVAL) ? -1 : 1;
        if (n == 0) return 0;
        if (errno != EINTR) return -1;
    }
}

/* A listening connection whose accepting was paused (EMFILE: memcached set
 * its flags to 0) resumes once a connection closes, checked every 10 ms as
 * vanilla's maxconns_handler does. */
static void wait_accepting(conn *c) {
    while (c->ev_flags == 0) {
        if (allow_new_conns) {
            pthread_mutex_lock(&accept_gate);
            if (c->ev_flags == 0) accept_new_conns(true);
            pthread_mutex_unlock(&accept_gate);
        } else {
            usleep(10000);
        }
    }
}

/* The idle timeout's wait in ms (-1: none). */
static int idle_timeout_ms(const struct conn_start *s) {
    if (s->worker == NULL || settings.idle_timeout <= 0 || IS_UDP(s->c->transport)) return -1;
    rel_time_t idle = current_time - s->c->last_cmd_time;
    int left = (int)settings.idle_timeout - (int)idle + 1;
    return (left > 0 ? left : 1) * 1000;
}

/* Runs the state machine for what the wait returned (r: 1 ready, 0 idle
 * timeout, -1 the descriptor is gone), under the gate. False: the thread's
 * connection is gone. */
static bool conn_turn(struct conn_start *s, int r) {
    conn *c = s->c;
    pthread_mutex_lock(s->gate);
    if (released() || c->state == conn_closed) {
        /* Closed by another thread while this one waited (a graceful
         * stop: conn_close_workers, once the workers have stopped). */
    } else if (r == 0) {
        conn_close_idle(c); /* closes it if idle long enough */
    } else if (r > 0) {
        short which = 0;
        if (s->flags & EV_READ) which |= EV_READ;
        if (s->flags & EV_WRITE) which |= EV_WRITE;
        s->handler(c->sfd, which, c);
    } else {
        /* poll failed on a live connection: close it as a failed read would. */
        conn_set_state(c, conn_closing);
        s->handler(c->sfd, EV_READ, c);
    }
    /* Closed, or handed to the logger (watch) or the crawler (metadump),
     * which give it back through conn_worker_readd. */
    bool gone = r < 0 || released() || c->state == conn_closed || c->state == conn_watch ||
                c->state == conn_io_queue;
    s->flags = c->ev_flags;
    pthread_mutex_unlock(s->gate);
    return !gone;
}

#ifdef MC_PORT_LOOM
static void conn_loop(struct conn_start *s);
static bool conn_begin(struct conn_start *s);

/* Where a rested connection's thread is continued: input, a hang-up, a
 * close, or (ETIMEDOUT) the idle timeout. */
static void conn_continue(void *arg) {
    struct conn_start *s = arg;
    if (conn_turn(s, loom_rest_status() == ETIMEDOUT ? 0 : 1))
        conn_loop(s);
    else
        free(s);
}

/* A connection's thread born at rest (mc_port_conn_start): its first run. */
static void conn_first(void *arg) {
    struct conn_start *s = arg;
    int r = loom_rest_status() == ETIMEDOUT ? 0 : 1;
    if (conn_begin(s) && conn_turn(s, r))
        conn_loop(s);
    else
        free(s);
}

/* The idle timeout as a deadline: NULL for none. */
static const struct timespec *deadline_in(int timeout_ms, struct timespec *d) {
    if (timeout_ms < 0) return NULL;
    clock_gettime(CLOCK_MONOTONIC, d);
    d->tv_sec += timeout_ms / 1000;
    d->tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (d->tv_nsec >= 1000000000L) d->tv_sec++, d->tv_nsec -= 1000000000L;
    return d;
}

/* Whether a connection waiting for EV_READ alone rests (TCP and unix
 * sockets of a worker; not UDP, whose socket every worker's connection
 * shares, nor listeners). */
static bool can_rest(const struct conn_start *s, short flags) {
    return s->worker != NULL && __atomic_load_n(&rest_on, __ATOMIC_RELAXED) &&
           (flags & (EV_READ | EV_WRITE)) == EV_READ && !IS_UDP(s->c->transport);
}

/* Threads that can never rest (ENOTSUP: a TLS block of their own, were the
 * port linked with libloom-pthread) say so once, and the port stops
 * trying; other refusals are this wait's only, and it waits on its stack. */
static void rest_refused(int rc) {
    if (rc == ENOTSUP && __atomic_exchange_n(&rest_on, false, __ATOMIC_RELAXED))
        fprintf(stderr, "%s: connections cannot rest (%s): they wait on their stacks\n", MC_PORT_NAME, strerror(rc));
}

/* A connection waiting for a request rests: does not return unless loom
 * refused (then the caller waits on its stack). */
static void conn_rest(struct conn_start *s, int timeout_ms) {
    struct timespec d;
    rest_refused(loom_rest_until(s->c->sfd, conn_continue, s, deadline_in(timeout_ms, &d)));
}
#endif

/* Waits and runs turns until the connection is gone, then frees s. Under
 * loom a connection waiting for a request rests instead (conn_rest), and
 * this loop ends where it stands, to be re-entered by conn_continue. */
static void conn_loop(struct conn_start *s) {
    conn *c = s->c;
    for (;;) {
        int timeout_ms = idle_timeout_ms(s);
        if (s->worker == NULL && s->flags == 0) {
            wait_accepting(c);
            s->flags = c->ev_flags;
            continue;
        }
#ifdef MC_PORT_LOOM
        if (can_rest(s, s->flags)) conn_rest(s, timeout_ms);
#endif
        if (!conn_turn(s, wait_conn(c, s->flags, timeout_ms))) break;
    }
    free(s);
}

/* On the connection's thread, first: its logger, and what the state
 * machine asked for. False: the connection is gone already. */
static bool conn_begin(struct conn_start *s) {
    conn *c = s->c;
    s->gate = gate_of(s->worker);
    if (s->worker != NULL) pthread_setspecific(logger_key, s->worker->l);
    /* The starter may still be setting the connection up (the worker sets
     * c->thread after conn_new returns, holding its gate): look at it
     * under the gate. */
    pthread_mutex_lock(s->gate);
    s->flags = c->ev_flags;
    bool gone = c->state == conn_closed;
    pthread_mutex_unlock(s->gate);
    return !gone;
}

static void *conn_main(void *arg) {
    struct conn_start *s = arg;
    if (conn_begin(s))
        conn_loop(s);
    else
        free(s);
    return NULL;
}

int mc_port_conn_start(conn *c, void (*handler)(evutil_socket_t, short, void *)) {
    struct conn_start *s = malloc(sizeof(*s));
    if (s == NULL) {
        perror("malloc");
        return -1;
    }
    s->c = c;
    s->worker = c->state == conn_listening ? NULL : pthread_getspecific(worker_key);
    s->handler = handler;
#ifdef MC_PORT_LOOM
    /* A connection that waits for its first request is born at rest: no
     * stack (nor thread record) until it sends, in the connections' cluster
     * (conn_attr), timed out there if it never does. */
    if (can_rest(s, c->ev_flags)) {
        struct timespec d;
        int rc = loom_rest_start_until(c->sfd, conn_first, s, &conn_attr, deadline_in(idle_timeout_ms(s), &d));
        if (rc == 0) return 0;
        rest_refused(rc);
    }
#endif
    pthread_t t;
    int rc = pthread_create(&t, &conn_attr, conn_main, s);
    if (rc != 0) {
        fprintf(stderr, "%s: cannot start a thread for connection %d: %s\n", MC_PORT_NAME, c->sfd, strerror(rc));
        free(s);
        return -1;
    }
    return 0;
}

void mc_port_worker_loop(LIBEVENT_THREAD *me) {
    pthread_mutex_t *gate = gate_of(me);
    pthread_setspecific(worker_key, me);
#ifdef HAVE_EVENTFD
    int fd = me->notify_event_fd;
#else
    int fd = me->notify_receive_fd;
#endif
    struct pollfd p = {.fd = fd, .events = POLLIN};
    for (;;) {
        if (poll(&p, 1, -1) < 0) {
            if (errno == EINTR) continue;
            perror("mc_port: poll on a worker's notify pipe");
            abort();
        }
        /* libevent runs thread_libevent_process for the pipe without
         * waiting (the pipe is readable). A non-blocking loop goes on while
         * callbacks were active, so it also fires the zero timer that
         * event_base_loopexit (queue_stop) leaves, and ends with got_exit
         * set. Only one call: the next would clear it. */
        pthread_mutex_lock(gate);
        event_base_loop(me->base, EVLOOP_NONBLOCK);
        /* Stopped (stop_threads, a graceful stop): the gate stays held, so
         * that its connections run no more, as a stopped vanilla worker's
         * do not, while the main thread closes them. */
        if (event_base_got_exit(me->base)) return;
        pthread_mutex_unlock(gate);
    }
}

void mc_port_main_loop(volatile int *stop, void (*tick)(evutil_socket_t, short, void *)) {
    struct timespec next, now;
    clock_gettime(CLOCK_MONOTONIC, &next);
    next.tv_sec += 1;
    while (!*stop) {
        usleep(20000);
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > next.tv_sec || (now.tv_sec == next.tv_sec && now.tv_nsec >= next.tv_nsec)) {
            pthread_mutex_lock(&accept_gate);
            tick(0, 0, NULL);
            pthread_mutex_unlock(&accept_gate);
            next = now;
            next.tv_sec += 1;
        }
    }
}
